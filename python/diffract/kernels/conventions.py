"""Convention presets: one name standing for a set of kernel options (light: imports no
kernel family, so the session can expand a preset before any family is loaded).

The kernels the options belong to are in :mod:`diffract.kernels.ww` (size guards, layer
selection), :mod:`diffract.kernels.spectral` (``esd_scale``, ``rand_shuffle``, ``rand_replicas``) and
:mod:`diffract.kernels.fits` (``fit_method``, ``intra_thresh_on``), :mod:`diffract.kernels.diagnostics`
(``detx_product``) and :mod:`diffract.kernels.ranks` (``weak_rank_conv2d_norm``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from diffract._errors import OptionValueError

#: convention name -> the kernel options it sets (options named explicitly win)
CONVENTIONS: dict[str, dict[str, Any]] = {
    "weightwatcher": {
        "esd_scale": "ww",
        "fit_method": "ww",
        "min_evals": 8,
        "max_evals": 15000,
        "max_N": 50000,
        "layer_selection": "weightwatcher",
        "lora_evals": "rank",
        "rand_shuffle": "kernel",
        "rand_replicas": "ww",
        "detx_product": "ww",
        "intra_thresh_on": "svals",
        "weak_rank_conv2d_norm": True,
    },
    "diffract": {
        "esd_scale": "N",
        "fit_method": "ww",
        "min_evals": None,
        "max_evals": None,
        "max_N": None,
        "layer_selection": "all",
        "lora_evals": "all",
        "rand_shuffle": "all",
        "rand_replicas": 1,
        "detx_product": "log_sum",
        "intra_thresh_on": "evals",
        "weak_rank_conv2d_norm": False,
    },
}


#: WeightWatcher's analyze() keywords that are not kernel options here -> what replaces them
#: (told by an apply that is given one)
WW_KEYWORDS: dict[str, str] = {
    "randomize": "fields esd_rand_max, js_rand_distance, rand_soft_rank, rand_max_dist, "
    "rand_mp_fit_sigma, num_traps ...",
    "mp_fit": "fields mp_fit_sigma, mp_fit_num_spikes, mp_fit_soft_rank, mp_fit_bulk_max ...",
    "detX": "fields detx_num_spikes, detx_esd_val, detx_rescaled_val, erg_gap",
    "ERG": "fields detx_num_spikes, detx_esd_val, detx_rescaled_val, erg_gap",
    "vectors": "fields vec_entropy_*, loc_ratio_*, part_ratio_* (e.g. loc_ratio_tail_mean)",
    "deltas": "fields esd_deltas, level_spacing_ratio",
    "plot": "figures of session.viz (esd, esd_full, esd_grid)",
    "savefig": "fig.write_image(path) on a session.viz figure",
    "layers": "session.filter(param_names=...) or session.weightwatcher.analyze(layers=...)",
    "pool": "models.add(model, pool=False)",
    "intra": "models.add(model, intra=True)",
    "base_model": "models.add(model, base_model=base)",
    "peft": "models.add(model, lora_scaling='none') and option layer_selection='peft'",
    "tolerance": "option weak_rank_tol (field weak_rank_loss)",
}


def ww_keyword_hints(names: list[str]) -> str:
    """What replaces each WeightWatcher keyword among ``names`` ("" for none), for an
    unknown-option error; ``session.weightwatcher.analyze()`` takes them all."""
    told = [f"{n}= -> {WW_KEYWORDS[n]}" for n in names if n in WW_KEYWORDS]
    if not told:
        return ""
    return (
        "; WeightWatcher's keyword(s) here: " + "; ".join(told) + " (or pass them to "
        "session.weightwatcher.analyze(...), which takes WeightWatcher's keywords)"
    )


def convention_options(conventions: str | None) -> dict[str, Any]:
    """The kernel options a convention preset stands for.

    Args:
        conventions: a key of :data:`CONVENTIONS` (``"weightwatcher"``, ``"diffract"``), or
            None for none.

    Returns:
        A new dict of option values ({} for None).

    Raises:
        OptionValueError: an unknown convention name.
    """
    if conventions is None:
        return {}
    if not isinstance(conventions, str) or conventions not in CONVENTIONS:
        raise OptionValueError(
            f"option 'conventions' must be one of {sorted(CONVENTIONS)} or None, "
            f"got {conventions!r}"
        )
    return dict(CONVENTIONS[conventions])


def with_conventions(
    conventions: str | None, options: Mapping[str, Any], known: set[str] | None = None
) -> dict[str, Any]:
    """``options`` on top of a convention preset.

    Args:
        conventions: the preset's name or None.
        options: options given by name (they win).
        known: if given, preset options outside it are left out (no kernel of the run has
            them).

    Returns:
        The merged options.
    """
    preset = convention_options(conventions)
    if known is not None:
        preset = {k: v for k, v in preset.items() if k in known}
    return {**preset, **options}
