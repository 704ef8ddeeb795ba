"""Thin adapters for frameworks with a callback convention: Keras, Lightning-style trainers
and Hugging Face's ``Trainer``.

All only call :meth:`Tracker.step <diffract.tracking.Tracker.step>` with the framework's
count of optimizer updates as the step, snapshot the initial weights when training starts,
and flush the tracker when it ends (the tracker stays open: close it yourself, or use it as a
context manager around ``fit``). When the tracker's experimental stop signal is set (a rule of
its ``stop_on`` fired, :mod:`diffract.tracking.alerts`) they ask the framework to stop.
"""

from __future__ import annotations

import importlib
from typing import Any


def _iterations(model: Any) -> int | None:
    """A Keras model's count of optimizer updates, or None without a built optimizer."""
    it = getattr(getattr(model, "optimizer", None), "iterations", None)
    if it is None:
        return None
    try:
        return int(getattr(it, "value", it))
    except (TypeError, ValueError):
        return None


def keras_callback(tracker: Any) -> Any:
    """A ``keras.callbacks.Callback`` that tracks ``model.fit``.

    The step is the optimizer's ``iterations`` (updates applied so far; it carries over a
    restored optimizer) or, without it, a count of batches continuing the tracker's steps.
    Training start offers the initial weights, each batch end the updated ones; training end
    flushes the tracker.

    Args:
        tracker: a :class:`~diffract.tracking.Tracker`.

    Returns:
        The callback, for ``model.fit(..., callbacks=[cb])``.

    Raises:
        ImportError: Keras is not installed.
    """
    base: Any = importlib.import_module("keras").callbacks.Callback

    class DiffractTracking(base):
        """Calls ``tracker.step(model)`` after every training batch."""

        def __init__(self) -> None:
            super().__init__()
            self.tracker = tracker

        def _step(self) -> None:
            step = _iterations(self.model)
            self.tracker.step(self.model, step=step)

        def on_train_begin(self, logs: Any = None) -> None:
            self._step()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self._step()
            if self.tracker.should_stop:  # experimental: a stop_on rule fired
                self.model.stop_training = True

        def on_train_end(self, logs: Any = None) -> None:
            self.tracker.flush()

    return DiffractTracking()


class LightningTracking:
    """A Lightning-style callback: ``on_train_start`` / ``on_train_batch_end`` /
    ``on_train_end`` with the ``(trainer, pl_module, ...)`` arguments Lightning passes; the
    step is ``trainer.global_step``.

    Args:
        tracker: a :class:`~diffract.tracking.Tracker`.
    """

    def __init__(self, tracker: Any) -> None:
        self.tracker = tracker

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Offer the initial weights."""
        self.tracker.step(pl_module, step=int(trainer.global_step))

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Offer the weights after an optimizer step; stop the trainer once the tracker's
        experimental stop signal is set (a ``stop_on`` rule fired)."""
        self.tracker.step(pl_module, step=int(trainer.global_step))
        if self.tracker.should_stop:
            trainer.should_stop = True

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Wait for the queued snapshots."""
        self.tracker.flush()


def lightning_callback(tracker: Any) -> Any:
    """A callback for a Lightning ``Trainer(callbacks=[...])``.

    With Lightning installed it is a ``lightning.pytorch.Callback`` (the Trainer checks
    that); without it, a plain :class:`LightningTracking` for trainers that call the same
    hooks.

    Args:
        tracker: a :class:`~diffract.tracking.Tracker`.

    Returns:
        The callback.
    """
    try:
        callback: Any = importlib.import_module("lightning.pytorch").Callback
    except ImportError:
        return LightningTracking(tracker)

    class DiffractLightningTracking(LightningTracking, callback):
        pass

    return DiffractLightningTracking(tracker)


def hf_callback(tracker: Any, *, merged: bool = False) -> Any:
    """A ``transformers.TrainerCallback`` that tracks ``Trainer.train()``.

    The step is ``state.global_step`` (optimizer updates so far, the step ``Trainer`` logs
    and saves under; it carries over a resumed checkpoint). Training start offers the
    initial weights, each optimizer step's end the updated ones (the tracker keeps the
    multiples of its ``every``); training end flushes the tracker. Only the main process
    (``state.is_world_process_zero``) offers weights, so a distributed run stores each step
    once. A PEFT model is stored as ``models.add`` stores it: each adapted layer's scaled
    LoRA update ``<layer>.lora`` (``scaling * B @ A``) beside the base weights, or with
    ``merged=True`` the merged weights ``W + scaling * B @ A`` in place of the base ones.

    Args:
        tracker: a :class:`~diffract.tracking.Tracker`.
        merged: store a PEFT model's merged weights instead of its LoRA updates.

    Returns:
        The callback, for ``Trainer(..., callbacks=[cb])`` or ``trainer.add_callback(cb)``.

    Raises:
        ImportError: transformers is not installed.
        InvalidArgumentError: ``merged`` is not a bool.
    """
    from diffract._errors import InvalidArgumentError

    if not isinstance(merged, bool):
        raise InvalidArgumentError(f"merged must be a bool, got {merged!r}")
    base: Any = importlib.import_module("transformers").TrainerCallback
    lora = "merged" if merged else "update"

    class DiffractHFTracking(base):
        """Calls ``tracker.step(model, step=state.global_step)`` after every optimizer step."""

        def __init__(self) -> None:
            super().__init__()
            self.tracker = tracker
            self.merged = merged

        def _step(self, state: Any, model: Any) -> None:
            if model is None or not state.is_world_process_zero:
                return
            self.tracker.step(model, step=int(state.global_step), lora=lora)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._step(state, kwargs.get("model"))

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            self._step(state, kwargs.get("model"))
            if self.tracker.should_stop:  # experimental: a stop_on rule fired
                control.should_training_stop = True
            return control

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                self.tracker.flush()

    return DiffractHFTracking()
