"""Thin adapters for frameworks with a callback convention: Keras and Lightning-style trainers.

Both only call :meth:`Tracker.step <diffract.tracking.Tracker.step>` with the framework's
count of optimizer updates as the step, snapshot the initial weights when training starts,
and flush the tracker when it ends (the tracker stays open: close it yourself, or use it as a
context manager around ``fit``).
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
        """Offer the weights after an optimizer step."""
        self.tracker.step(pl_module, step=int(trainer.global_step))

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
