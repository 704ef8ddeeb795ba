"""A snapshot: a host copy of a model's weight leaves, taken on the training thread.

:func:`take_snapshot` names the leaves with :func:`diffract.extract.extract` (the same names,
types and layouts ``models.add`` would give the model), then copies each array to host memory:

* NumPy arrays: ``np.array(copy=True)`` (one memcpy);
* PyTorch tensors: ``.detach().clone()`` on the CPU; a CUDA tensor is copied with
  ``.to("cpu", non_blocking=True)`` and a CUDA event is recorded after the copies, so the
  training thread does not wait for them: the analysis worker waits on the event
  (:meth:`Snapshot.wait_ready`) before it reads the arrays. Stream order makes the copy read
  the weights as they were at the call, before later optimizer kernels;
* JAX arrays (Equinox, Flax, Keras on JAX): one ``jax.device_get`` of every accelerator
  array at once (started with ``copy_to_host_async``), a NumPy copy of CPU ones.

A snapshot holds no reference to the model. The worker stores it with ``models.add``: the
``diffract.tracking`` extractor (registered by :func:`register_snapshot_extractor`) gives it
back its names, types and layouts.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from diffract._core.slices import ParameterType
from diffract.extract import ModelTree, extract, register_extractor

#: the name the snapshot extractor is registered under
EXTRACTOR_NAME = "diffract.tracking"


@dataclass
class SnapshotLeaf:
    """One weight leaf of a snapshot: its name, host copy, type and layout."""

    name: str
    array: Any
    type: ParameterType
    layout: str
    #: the slice's meta from the extraction (a LoRA update's rank and scaling, ...)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Snapshot:
    """The weights of one training step, copied to host memory.

    Attributes:
        step: the training step.
        leaves: the weight leaves, in extraction order.
        framework: the framework the model came from.
        source: a description of the model.
        skipped: leaves the extraction left out, with the reason.
        nbytes: bytes held by the copies.
        seconds: time the copy took on the training thread.
    """

    step: int
    leaves: list[SnapshotLeaf]
    framework: str
    source: str
    skipped: dict[str, str] = field(default_factory=dict)
    nbytes: int = 0
    seconds: float = 0.0
    #: waits until asynchronous device-to-host copies are done (None: nothing to wait for)
    _ready: Callable[[], None] | None = None

    def wait_ready(self) -> None:
        """Block until every copy has landed in host memory (a no-op for synchronous ones)."""
        if self._ready is not None:
            self._ready()
            self._ready = None

    def tree(self) -> ModelTree:
        """The snapshot as the :class:`~diffract.ModelTree` ``models.add`` extracts."""
        return ModelTree(
            tree={leaf.name: leaf.array for leaf in self.leaves},
            types={leaf.name: leaf.type for leaf in self.leaves},
            framework=self.framework,
            source=f"{self.source} (step {self.step})",
            skipped=dict(self.skipped),
            layouts={leaf.name: leaf.layout for leaf in self.leaves},
            meta={leaf.name: dict(leaf.meta) for leaf in self.leaves if leaf.meta},
        )


def register_snapshot_extractor() -> None:
    """Let ``models.add`` read a :class:`Snapshot` (idempotent: re-registering replaces)."""
    register_extractor(EXTRACTOR_NAME, lambda obj: isinstance(obj, Snapshot), _snapshot_tree)


def _snapshot_tree(snapshot: Snapshot) -> ModelTree:
    snapshot.wait_ready()
    return snapshot.tree()


def take_snapshot(
    model: Any,
    step: int,
    filter_spec: Any = None,
    *,
    non_blocking: bool = True,
    lora: str = "update",
) -> Snapshot:
    """Copy the weight leaves of ``model`` to host memory, named as ``models.add`` names them.

    Args:
        model: a PyTorch module or state_dict, an Equinox module, Flax params or an NNX
            module, a Keras model, a ``{name: array}`` dict (anything ``models.add`` takes
            except checkpoint paths).
        step: the training step it is.
        filter_spec: which leaves to keep (as for ``models.add``); default: float arrays.
        non_blocking: copy CUDA tensors asynchronously (the worker waits for them).
        lora: LoRA / PEFT adapters as their scaled update ``<layer>.lora`` (``"update"``)
            or merged into the base weight (``"merged"``), as ``models.add(lora=...)``.

    Returns:
        The snapshot.

    Raises:
        ExtractionError: the model has no weight leaves, is not a model object, or a bad
            ``lora`` value.
    """
    from diffract._errors import ExtractionError
    from diffract.session.models import unwrap_model

    start = time.perf_counter()
    if isinstance(model, str) or hasattr(model, "__fspath__"):
        raise ExtractionError(
            "tracker.step() takes the model object being trained, not a checkpoint path "
            "(add a checkpoint file with session.models.add)"
        )
    ex = extract(unwrap_model(model), filter_spec, lora=lora)
    if not ex.leaves:
        raise ExtractionError(
            f"no weight leaves in the model given at step {step} (skipped: "
            f"{dict(list(ex.skipped.items())[:5])})"
        )
    arrays, ready = _host_copies([leaf.array for leaf in ex.leaves], non_blocking)
    leaves = [
        SnapshotLeaf(leaf.name, a, leaf.type, leaf.layout, dict(leaf.meta))
        for leaf, a in zip(ex.leaves, arrays, strict=True)
    ]
    nbytes = sum(int(a.nbytes) for a in arrays)
    return Snapshot(
        step=step,
        leaves=leaves,
        framework=ex.framework,
        source=ex.source,
        skipped=dict(ex.skipped),
        nbytes=nbytes,
        seconds=time.perf_counter() - start,
        _ready=ready,
    )


def _host_copies(
    arrays: list[Any], non_blocking: bool
) -> tuple[list[Any], Callable[[], None] | None]:
    """Host copies of ``arrays`` (same order), and what waits for asynchronous ones."""
    torch = sys.modules.get("torch")
    jax = sys.modules.get("jax")
    out: list[Any] = [None] * len(arrays)
    on_device: list[int] = []  # jax arrays on an accelerator, fetched together
    cuda_devices: set[Any] = set()  # devices with asynchronous copies in flight
    for i, a in enumerate(arrays):
        if isinstance(a, np.ndarray):
            out[i] = np.array(a, copy=True)
        elif torch is not None and isinstance(a, torch.Tensor):
            out[i] = _torch_copy(torch, a, non_blocking, cuda_devices)
        elif jax is not None and isinstance(a, jax.Array):
            if all(d.platform == "cpu" for d in a.devices()):
                out[i] = np.array(a, copy=True)
            else:
                a.copy_to_host_async()
                on_device.append(i)
        else:
            out[i] = np.array(a, copy=True)
    if on_device:
        fetched = jax.device_get([arrays[i] for i in on_device])  # type: ignore[union-attr]
        for i, host in zip(on_device, fetched, strict=True):
            out[i] = host
    ready: Callable[[], None] | None = None
    if cuda_devices:  # one event per device, after its copies: the worker waits on them
        events = []
        for device in cuda_devices:
            event = torch.cuda.Event()  # type: ignore[union-attr]
            event.record(torch.cuda.current_stream(device))  # type: ignore[union-attr]
            events.append(event)

        def ready() -> None:
            for e in events:
                e.synchronize()

    return out, ready


def _torch_copy(torch: Any, t: Any, non_blocking: bool, cuda_devices: set[Any]) -> Any:
    """A host copy of one tensor; a CUDA copy is asynchronous (its device is noted)."""
    with torch.no_grad():
        t = t.detach()
        if t.device.type == "cpu":
            return t.clone()
        if t.device.type == "cuda" and non_blocking:
            cuda_devices.add(t.device)
            return t.to("cpu", non_blocking=True)
        return t.to("cpu")
