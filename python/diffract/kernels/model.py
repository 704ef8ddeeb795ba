"""Per-model aggregates of per-slice fields (WeightWatcher's ``get_summary()`` and friends).
Slices where the field is missing, failed or not finite are left out of the mean."""

from __future__ import annotations

import numpy as np

from diffract.kernels.norms import finite_values, nonempty
from diffract.kernels.spec import define


def _mean(values, name):
    return float(np.mean(nonempty(finite_values(values), name)))


@define(outputs="model_pl_alpha_norm", level="model", family="model")
def model_pl_alpha_norm(pl_log_alpha_norm):
    """Mean over slices of log10 sum_i lambda_i^alpha. WeightWatcher summary
    ``log_alpha_norm`` (with esd_scale="ww")."""
    return _mean(pl_log_alpha_norm, "pl_log_alpha_norm")


@define(outputs="model_tpl_alpha_norm", level="model", family="model")
def model_tpl_alpha_norm(tpl_log_alpha_norm):
    """Mean over slices of log10 sum_i lambda_i^alpha_TPL."""
    return _mean(tpl_log_alpha_norm, "tpl_log_alpha_norm")


@define(outputs="model_pl_alpha", level="model", family="model")
def model_pl_alpha(pl_alpha):
    """Mean power-law alpha over slices. WeightWatcher summary ``alpha``."""
    return _mean(pl_alpha, "pl_alpha")


@define(outputs="model_pl_alpha_weighted", level="model", family="model")
def model_pl_alpha_weighted(pl_alpha_weighted):
    """Mean of alpha * log10(lambda_max) over slices. WeightWatcher summary
    ``alpha_weighted`` (with esd_scale="ww")."""
    return _mean(pl_alpha_weighted, "pl_alpha_weighted")


@define(outputs="model_stable_rank", level="model", family="model")
def model_stable_rank(stable_rank):
    """Mean stable rank over slices. WeightWatcher summary ``stable_rank``."""
    return _mean(stable_rank, "stable_rank")


@define(outputs="model_mp_soft_rank", level="model", family="model")
def model_mp_soft_rank(mp_soft_rank):
    """Mean MP soft rank over slices (cf. WeightWatcher summary ``mp_softrank``)."""
    return _mean(mp_soft_rank, "mp_soft_rank")
