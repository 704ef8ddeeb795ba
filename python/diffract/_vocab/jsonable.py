"""One JSON normaliser: NumPy values and containers -> plain JSON data.

Used by model metadata checks, exports, the server's replies and sampling manifests, each with
the policy it needs (what to do with non-finite floats, arrays and unknown types).

JSON has no complex numbers: a complex value (a Python ``complex``, a NumPy complex scalar or
array) becomes ``{"real": <real part>, "imag": <imaginary part>}``, the parts as numbers for a
scalar and as nested lists of the array's shape for an array (read it back as
``np.asarray(d["real"]) + 1j * np.asarray(d["imag"])``). The parts follow the ``nonfinite``
policy like any float.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Literal

from diffract._errors import InvalidArgumentError

__all__ = ["canonical_json", "to_jsonable"]

_NOT_JSON = (
    "{where} is not JSON-serializable ({kind}: {value!r}); it holds JSON data only: str, int, "
    "float, bool, None, lists and dicts of them"
)


def to_jsonable(
    value: Any,
    *,
    where: str = "value",
    nonfinite: Literal["none", "keep"] = "none",
    arrays: Literal["list", "drop"] = "list",
    other: Literal["error", "str", "keep"] = "error",
) -> Any:
    """``value`` as plain JSON data.

    Args:
        value: a scalar, NumPy scalar or array, or a dict / list / tuple of them.
        where: how an error names the value (nested keys are appended).
        nonfinite: ``"none"`` turns NaN and infinities (also inside arrays) into None;
            ``"keep"`` leaves them (for stores that write JSON with NaN allowed).
        arrays: ``"list"`` turns non-scalar arrays into nested lists; ``"drop"`` into None.
        other: what a value of any other type becomes: ``"error"`` raises, ``"str"`` its
            ``str()``, ``"keep"`` the value unchanged.

    Returns:
        JSON data: None, bool, int, float, str, lists and dicts with string keys; a complex
        scalar or array as ``{"real": ..., "imag": ...}`` (see the module docstring).

    Raises:
        InvalidArgumentError: a dict key is not a string, or (``other="error"``) a value has a
            type JSON cannot hold; the message names ``where``.
    """

    # NumPy values exist only once NumPy is imported: canonical JSON for sampling manifests
    # (standard library only) must not import it
    np = sys.modules.get("numpy")

    def fix(v: Any, at: str) -> Any:
        if v is None or isinstance(v, (str, bool)):
            return v
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            return v if nonfinite == "keep" or math.isfinite(v) else None
        if isinstance(v, complex):  # NumPy complex scalars too (they subclass complex)
            return {"real": fix(float(v.real), at), "imag": fix(float(v.imag), at)}
        if np is not None and isinstance(v, np.generic) and v.dtype.kind == "c":
            return fix(complex(v), at)  # complex64 scalars
        if np is not None and isinstance(v, np.ndarray) and v.dtype.kind == "c":
            if v.ndim == 0:
                return fix(complex(v.item()), at)
            if arrays == "drop":
                return None
            return {"real": fix(v.real.tolist(), at), "imag": fix(v.imag.tolist(), at)}
        if (
            np is not None
            and isinstance(v, np.generic)
            and (v.dtype.kind in "biuf" or isinstance(v, np.str_))
        ):
            return fix(v.item(), at)
        if np is not None and isinstance(v, np.ndarray) and v.dtype.kind in "biuf":
            if v.ndim == 0:
                return fix(v.item(), at)
            return fix(v.tolist(), at) if arrays == "list" else None
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if not isinstance(k, str):
                    raise InvalidArgumentError(
                        f"{at}: keys must be strings, got {type(k).__name__}: {k!r}"
                    )
                out[k] = fix(x, f"{at}[{k!r}]")
            return out
        if isinstance(v, (list, tuple)):
            return [fix(x, f"{at}[{i}]") for i, x in enumerate(v)]
        if other == "str":
            return str(v)
        if other == "keep":
            return v
        raise InvalidArgumentError(_NOT_JSON.format(where=at, kind=type(v).__name__, value=v))

    return fix(value, where)


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON text: sorted keys, no whitespace, UTF-8 kept, NaN refused.

    Args:
        value: JSON data (see :func:`to_jsonable`).

    Returns:
        The text; equal data always gives equal text, so it can be hashed.

    Raises:
        TypeError, ValueError: the value holds something JSON cannot (NaN included).
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
