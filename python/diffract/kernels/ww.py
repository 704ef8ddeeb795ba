"""WeightWatcher conventions: which slices WeightWatcher analyzes (its size guards and layer
selection), the one-argument convention preset, and the model summary in its terms.

``conventions="weightwatcher"`` (on ``compute.apply``, ``compute.configure`` or
``Session(...)``) is a preset of kernel options (:data:`CONVENTIONS`, in the light module
:mod:`diffract.kernels.conventions`): WeightWatcher's
eigenvalue scale (``esd_scale="ww"``), its size guards with its defaults (``min_evals=8``,
``max_evals=15000``, ``max_N=50000``) and its layer selection
(``layer_selection="weightwatcher"``: dense, conv and embedding slices only). Options given
by name override the preset's. A slice the guards or the selection leave out is *not
applicable*, with the reason in ``RunReport.not_applicable_reasons``, for every spectral field
(they all start from ``weights_spectrum`` or ``weights_rand``, which take the gate's output).
"""

from __future__ import annotations

import numpy as np

from diffract._vocab.slices import ParameterType
from diffract.kernels.basic import LORA_EVALS, lora_kept_evals
from diffract.kernels.conventions import CONVENTIONS as CONVENTIONS
from diffract.kernels.norms import finite_values, nonempty
from diffract.kernels.spec import SliceNotApplicable, at_least, define, one_of

#: accepted values of ``layer_selection``
LAYER_SELECTIONS = ("all", "weightwatcher", "peft")
#: the slice types WeightWatcher 0.7.7 analyzes (its DENSE, CONV1D, CONV2D, EMBEDDING)
WW_LAYER_TYPES = (ParameterType.DENSE, ParameterType.CONV, ParameterType.EMBEDDING)


def _reason(slice_info, weights, min_evals, max_evals, max_N, layer_selection) -> str | None:
    """Why WeightWatcher's rules leave this slice out, or None (the order of its
    ``layer_supported``)."""
    if layer_selection not in LAYER_SELECTIONS:
        raise ValueError(f"layer_selection must be one of {LAYER_SELECTIONS}")
    if layer_selection != "all" and slice_info.type not in WW_LAYER_TYPES:
        return (
            f"layer type {slice_info.type.value!r} is not analyzed with "
            f"layer_selection={layer_selection!r} (dense, conv and embedding only)"
        )
    if layer_selection == "peft" and "lora" not in slice_info.meta:
        return (
            "not a LoRA adapter slice: layer_selection='peft' analyzes the adapters only "
            "(WeightWatcher's analyze(peft=True))"
        )
    if "intra" in slice_info.meta:
        return None  # WeightWatcher guards the layers of an intra product, not the product
    shape = np.shape(weights)
    n, m = max(shape[0], shape[1]), min(shape[0], shape[1])
    rf = int(np.prod(shape[2:], dtype=np.int64)) if len(shape) > 2 else 1
    evals = m * rf
    if min_evals is not None and evals < min_evals:
        return f"num_evals {evals} < min_evals {min_evals}"
    if max_evals is not None and evals > max_evals:
        return f"num_evals {evals} > max_evals {max_evals}"
    if max_N is not None and n > max_N:
        return f"N {n} > max_N {max_N}"
    return None


@define(
    outputs="spectrum_gate",
    min_ndim=2,
    family="weightwatcher",
    transient=("spectrum_gate",),
    option_rules={
        "min_evals": at_least(0),
        "max_evals": at_least(0),
        "max_N": at_least(0),
        "layer_selection": one_of(*LAYER_SELECTIONS),
        "lora_evals": one_of(*LORA_EVALS),
    },
)
def spectrum_gate(
    weights,
    slice_info,
    min_evals=None,
    max_evals=None,
    max_N=None,
    layer_selection="all",
    lora_evals="all",
):
    """Whether the slice's spectrum is computed: True, or *not applicable* with the reason
    (the run report's ``not_applicable_reasons``), for every spectral field of the slice.
    WeightWatcher's ``layer_supported`` rules, in its order, with N = max(out, in),
    M = min(out, in) of one kernel-position matrix, rf = kernel positions and
    num_evals = M * rf:

    * ``layer_selection="weightwatcher"``: only dense, conv and embedding slices (WW skips
      norm layers, recurrent ones (LSTM, GRU, RNN: from a module and from a state dict) and
      unknown types); "peft": only the LoRA slices (slice meta ``"lora"``:
      the ``<layer>.lora`` updates, or merged weights), as WW's ``analyze(peft=True)``;
      "all" (default): every matrix slice;
    * ``min_evals``: skip when num_evals < min_evals (WW default 8);
    * ``max_evals``: skip when num_evals > max_evals (WW default 15000);
    * ``max_N``: skip when N > max_N (WW default 50000).

    The guards leave ``intra:`` product slices alone (WW guards the layers of a product).

    None (the default of each guard) turns it off. ``conventions="weightwatcher"`` sets all
    four to WeightWatcher's defaults, and ``lora_evals="rank"``: a rank-r LoRA update slice
    keeps only its top r eigenvalues (WeightWatcher's truncated SVD), so the gate returns r
    for it (``weights_spectrum`` truncates; ``num_evals`` follows), True for every other
    slice. Transient (never stored)."""
    why = _reason(slice_info, weights, min_evals, max_evals, max_N, layer_selection)
    if why is not None:
        raise SliceNotApplicable(why)
    kept = lora_kept_evals(slice_info, lora_evals)
    return True if kept is None else kept


# --- the model summary in WeightWatcher's terms ----------------------------------------------


@define(outputs="model_esd_log_norm", level="model", family="model")
def model_esd_log_norm(esd_log_norm):
    """Mean over slices of log10 sum_i lambda_i. WeightWatcher summary ``log_norm`` with
    esd_scale="ww" (for Conv2d WW's per-layer eigenvalues are halved, so this differs from
    ``log_norm``, the mean of log10 ||W||_F^2)."""
    return float(np.mean(nonempty(finite_values(esd_log_norm), "esd_log_norm")))


@define(outputs="model_esd_log_max", level="model", family="model")
def model_esd_log_max(esd_log_max):
    """Mean over slices of log10 lambda_max. WeightWatcher summary ``log_spectral_norm`` with
    esd_scale="ww"."""
    return float(np.mean(nonempty(finite_values(esd_log_max), "esd_log_max")))
