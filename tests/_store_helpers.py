"""Helpers shared by the store tests."""

from __future__ import annotations

from diffract import ParameterType, SliceInfo
from diffract._vocab.slices import make_uid


def make_slices(model_id, arrays):
    """SliceInfos for ``{name: array}`` of one model (2-D dense, else bias), in order."""
    return [
        SliceInfo(
            model_id,
            name,
            make_uid(model_id, name),
            ParameterType.DENSE if a.ndim == 2 else ParameterType.BIAS,
            a.shape,
            str(a.dtype),
            i,
        )
        for i, (name, a) in enumerate(arrays.items())
    ]
