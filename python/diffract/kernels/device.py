"""Singular values on an accelerator (optional): PyTorch or JAX, CUDA/ROCm GPUs or TPUs.

The CPU path (NumPy/LAPACK) stays the default. ``device=`` picks another:

* ``"torch:cuda"`` / ``"torch:cuda:1"`` / ``"torch:cpu"``: ``torch.linalg.eigvalsh`` of the
  float64 Gram matrix on that device;
* ``"jax:gpu"`` / ``"jax:tpu"`` / ``"jax:cpu"``: ``jnp.linalg.eigvalsh`` on that backend
  (float64 needs ``jax_enable_x64``; it is switched on for the call);
* ``"cuda"``: the first of torch or JAX that sees a GPU; ``"auto"``: that, or the CPU path.

Matrices are sent one slice (a stack of kernel-position matrices) at a time, so device
memory holds one Gram stack per call. Results equal the CPU path within float64 rounding.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache

import numpy as np

from diffract._errors import ConfigError

CPU = "cpu"


@lru_cache(maxsize=1)
def available_accelerators() -> tuple[str, ...]:
    """Device strings with a GPU/TPU behind them on this machine (checked once)."""
    found: list[str] = []
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            found.append("torch:cuda")
    if importlib.util.find_spec("jax") is not None:
        import jax

        for backend in ("gpu", "tpu"):
            try:
                if jax.devices(backend):
                    found.append(f"jax:{backend}")
            except RuntimeError:
                pass
    return tuple(found)


def available_devices() -> list[str]:
    """Every device string that works here: ``"cpu"``, the accelerators, and the CPU devices
    of PyTorch and JAX when they are installed (for error messages)."""
    out = [CPU]
    if importlib.util.find_spec("torch") is not None:
        out.append("torch:cpu")
    if importlib.util.find_spec("jax") is not None:
        out.append("jax:cpu")
    return out + list(available_accelerators())


def _unavailable(device: str, why: str) -> ConfigError:
    return ConfigError(
        f"device={device!r}: {why}; devices available on this machine: {available_devices()} "
        "('auto' picks a GPU when there is one, else the CPU)"
    )


def resolve_device(device: str | None) -> str:
    """Validate a device string; ``"auto"``/``"cuda"`` resolve to a concrete one.

    The spelling and the availability are checked here (once per distinct device), so a
    device that cannot work is one :class:`ConfigError` before a run, not a failure per
    slice: ``"torch:cuda"`` or ``"jax:gpu"`` on a machine without a GPU, ``"torch:cdua"``."""
    if device in (None, "", CPU, "numpy"):
        return CPU
    if not isinstance(device, str):
        raise ConfigError(
            f"device must be a string such as 'cpu', 'auto', 'cuda', 'torch:cuda' or 'jax:gpu', "
            f"got {type(device).__name__}: {device!r}"
        )
    if device in ("auto", "cuda", "gpu"):
        accel = available_accelerators()
        if accel:
            return accel[0]
        if device == "auto":
            return CPU
        raise _unavailable(device, "no GPU is visible to PyTorch or JAX on this machine")
    lib, _, where = device.partition(":")
    if lib not in ("torch", "jax") or not where:
        raise ConfigError(
            f"unknown device {device!r}: use 'cpu', 'auto', 'cuda', 'torch:<device>' or 'jax:<backend>'"
        )
    if importlib.util.find_spec(lib) is None:
        raise ConfigError(f"device={device!r} needs {lib} installed")
    _check_available(device)
    return device


def check_svd_device(value: str | None) -> None:
    """``svd_device="cuda"`` (the SVD kernels' option) needs PyTorch with a CUDA GPU: a
    :class:`ConfigError` otherwise ("cpu" and "auto" always work)."""
    if value == "cuda" and "torch:cuda" not in available_accelerators():
        raise ConfigError(
            "svd_device='cuda': PyTorch sees no CUDA GPU on this machine (or is not "
            "installed); use svd_device='cpu', or 'auto' to use a GPU when there is one"
        )


@lru_cache(maxsize=32)
def _check_available(device: str) -> None:
    """A :class:`ConfigError` unless ``device`` (``"torch:..."``/``"jax:..."``) is spelled
    right and present on this machine (results are cached: errors are raised each time)."""
    lib, _, where = device.partition(":")
    if lib == "torch":
        import torch

        try:
            dev = torch.device(where)
        except (RuntimeError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise _unavailable(
                device, f"PyTorch does not know the device {where!r} ({first})"
            ) from None
        if dev.type == "cpu":
            return
        if dev.type == "cuda":
            if not torch.cuda.is_available():
                raise _unavailable(device, "PyTorch sees no CUDA/ROCm GPU on this machine")
            if dev.index is not None and dev.index >= torch.cuda.device_count():
                raise _unavailable(
                    device,
                    f"PyTorch sees {torch.cuda.device_count()} GPU(s), there is no index {dev.index}",
                )
            return
        if dev.type == "mps":
            mps = getattr(torch.backends, "mps", None)
            if mps is None or not mps.is_available():
                raise _unavailable(device, "the Apple MPS backend is not available")
            return
        probe = getattr(getattr(torch, dev.type, None), "is_available", None)
        if callable(probe) and not probe():
            raise _unavailable(device, f"PyTorch's {dev.type!r} backend is not available")
        return
    import jax

    try:
        found = jax.devices(where)
    except (RuntimeError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise _unavailable(device, f"JAX has no {where!r} backend here ({first})") from None
    if not found:
        raise _unavailable(device, f"JAX has no {where!r} device here")


def gram_svals(kmats: np.ndarray, device: str) -> np.ndarray:
    """Descending singular values of each matrix of a ``(P, a, b)`` stack, from the float64
    eigenvalues of the smaller Gram matrix computed on ``device`` (a stack whose Gram matrix
    would over- or underflow is scaled by a power of two first). Returns ``(P, min(a, b))``."""
    if kmats.ndim == 2:
        kmats = kmats[None]
    a, b = kmats.shape[-2:]
    from diffract.kernels._linalg import gram_exponent

    e = gram_exponent(np.asarray(kmats, dtype=np.float64), max(a, b))
    if e:  # squaring would over- or underflow: the stack scaled exactly by 2^-e, as on the CPU
        return np.ldexp(gram_svals(np.ldexp(np.asarray(kmats, dtype=np.float64), -e), device), e)
    lib, _, where = device.partition(":")
    if lib == "torch":
        import torch

        t = torch.as_tensor(np.ascontiguousarray(kmats), dtype=torch.float64, device=where)
        g = t.transpose(-1, -2) @ t if a >= b else t @ t.transpose(-1, -2)
        ev = torch.linalg.eigvalsh(g).cpu().numpy()
    elif lib == "jax":
        import jax
        import jax.numpy as jnp

        with jax.enable_x64(True) if hasattr(jax, "enable_x64") else _x64():
            dev = jax.devices(where)[0]
            x = jax.device_put(np.asarray(kmats, dtype=np.float64), dev)
            g = jnp.swapaxes(x, -1, -2) @ x if a >= b else x @ jnp.swapaxes(x, -1, -2)
            ev = np.asarray(jnp.linalg.eigvalsh(g))
    else:
        raise ConfigError(f"gram_svals needs an accelerator device, got {device!r}")
    ev = np.clip(ev, 0.0, None)
    return np.sqrt(ev)[..., ::-1].astype(np.float64)


class _x64:
    """Fallback context manager for JAX versions without ``jax.enable_x64``."""

    def __enter__(self):
        import jax

        self._old = jax.config.jax_enable_x64
        jax.config.update("jax_enable_x64", True)

    def __exit__(self, *exc):
        import jax

        jax.config.update("jax_enable_x64", self._old)
