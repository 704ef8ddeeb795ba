"""Diagnosis: rules that turn stored numbers into answers (over-trained, under-trained,
unreliable fit, correlation trap, rank collapse, outlier against its depth neighbours).

Each rule is a kernel with two outputs, ``diag_<rule>`` (a bool) and ``diag_<rule>_reason``
(a one-line string quoting the numbers it read, whether or not the rule fired), so a
diagnosis persists, filters and exports like any other field. The thresholds are kernel
options; their sources are listed in ``docs/diagnosis.md``. :data:`RULES` names the rules in
display order; :data:`RULE_FUNCS` evaluates each on plain values (the tracker's alerts use it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from diffract.kernels.spec import at_least, define

#: the per-layer rules, in display order: rule -> one line saying what it means
RULES: dict[str, str] = {
    "over_trained": "power-law alpha below over_trained_alpha (very heavy-tailed, over-fit)",
    "under_trained": "power-law alpha above under_trained_alpha (close to random)",
    "unreliable_fit": "the power-law fit is not to be trusted (KS distance, tail size, sigma)",
    "trap": "spikes in the randomized ESD: a few large entries, not learned correlations",
    "rank_collapse": "most eigenvalues vanish, or the stable rank is far below the smaller side",
}

#: the model-level rule: layers whose alpha stands out from their depth neighbours
MODEL_RULE = "outlier"


def _f(v: float) -> str:
    return f"{float(v):.3g}"


def _beyond(value: float, limit: float, *, above: bool) -> tuple[bool, str]:
    """(fired, relation) of a one-sided limit: ``value`` above (or below) ``limit``, with the
    operator the reason prints (its negation when the rule did not fire)."""
    if above:
        fired = bool(value > limit)
        return fired, ">" if fired else "<="
    fired = bool(value < limit)
    return fired, "<" if fired else ">="


def _verdict(why: list[str], within: str) -> tuple[bool, str]:
    """(fired, reason) of a rule with several tests: fired when any failed (``why`` lists
    them), else ``within`` says what was measured."""
    if why:
        return True, "; ".join(why)
    return False, within


def over_trained_rule(pl_alpha: float, over_trained_alpha: float = 2.0) -> tuple[bool, str]:
    """(fired, reason) of the over-trained rule on a fitted alpha."""
    fired, rel = _beyond(pl_alpha, over_trained_alpha, above=False)
    return fired, f"alpha {_f(pl_alpha)} {rel} {_f(over_trained_alpha)}"


def under_trained_rule(pl_alpha: float, under_trained_alpha: float = 6.0) -> tuple[bool, str]:
    """(fired, reason) of the under-trained rule on a fitted alpha."""
    fired, rel = _beyond(pl_alpha, under_trained_alpha, above=True)
    return fired, f"alpha {_f(pl_alpha)} {rel} {_f(under_trained_alpha)}"


def unreliable_fit_rule(
    pl_ks: float,
    pl_num_spikes: int,
    pl_alpha_sigma: float,
    max_pl_ks: float = 0.1,
    min_tail_evals: int = 10,
    max_alpha_sigma: float = 0.25,
) -> tuple[bool, str]:
    """(fired, reason) of the unreliable-fit rule: KS distance above ``max_pl_ks``, fewer
    than ``min_tail_evals`` eigenvalues in the fitted tail, or sigma above
    ``max_alpha_sigma`` (any one fires it; the reason lists those that did)."""
    why = []
    if pl_ks > max_pl_ks:
        why.append(f"KS distance {_f(pl_ks)} > {_f(max_pl_ks)}")
    if pl_num_spikes < min_tail_evals:
        why.append(f"{int(pl_num_spikes)} tail eigenvalues < {int(min_tail_evals)}")
    if not pl_alpha_sigma <= max_alpha_sigma:
        why.append(f"sigma {_f(pl_alpha_sigma)} > {_f(max_alpha_sigma)}")
    return _verdict(
        why,
        f"KS distance {_f(pl_ks)}, {int(pl_num_spikes)} tail eigenvalues, "
        f"sigma {_f(pl_alpha_sigma)}: within limits",
    )


def trap_rule(num_traps: int, max_traps: int = 0) -> tuple[bool, str]:
    """(fired, reason) of the correlation-trap rule on the randomized ESD's spike count."""
    fired, rel = _beyond(num_traps, max_traps, above=True)
    return fired, f"{int(num_traps)} spikes in the randomized ESD {rel} {int(max_traps)}"


def rank_collapse_rule(
    weak_rank_loss: int,
    stable_rank: float,
    lower_dim: int,
    collapse_rank_loss_share: float = 0.5,
    collapse_stable_rank_share: float = 0.01,
) -> tuple[bool, str]:
    """(fired, reason) of the rank-collapse rule: the share of (near-)zero eigenvalues
    (``weak_rank_loss / lower_dim``) at least ``collapse_rank_loss_share``, or the stable rank
    below ``collapse_stable_rank_share`` times the smaller dimension."""
    m = max(int(lower_dim), 1)
    share = weak_rank_loss / m
    limit = collapse_stable_rank_share * m
    why = []
    if share >= collapse_rank_loss_share:
        why.append(
            f"{int(weak_rank_loss)} of {m} eigenvalues vanish "
            f"({share:.0%} >= {collapse_rank_loss_share:.0%})"
        )
    if stable_rank < limit:
        why.append(f"stable rank {_f(stable_rank)} < {_f(collapse_stable_rank_share)} x {m}")
    return _verdict(
        why,
        f"{int(weak_rank_loss)} of {m} eigenvalues vanish, stable rank {_f(stable_rank)} "
        f">= {_f(limit)}",
    )


_POSITIVE = at_least(0)


@define(
    outputs=("diag_over_trained", "diag_over_trained_reason"),
    family="diagnosis",
    descriptions={"diag_over_trained_reason": "why diag_over_trained is what it is, with numbers"},
)
def diag_over_trained(pl_alpha, over_trained_alpha=2.0):
    """Over-trained: pl_alpha < over_trained_alpha (2, WeightWatcher's OVER_TRAINED_THRESH;
    Martin & Mahoney 2021: alpha < 2 is the very heavy-tailed regime of over-fit layers).
    The same option sets ``pl_warning``."""
    return over_trained_rule(pl_alpha, over_trained_alpha)


@define(
    outputs=("diag_under_trained", "diag_under_trained_reason"),
    family="diagnosis",
    descriptions={"diag_under_trained_reason": "why diag_under_trained is what it is"},
)
def diag_under_trained(pl_alpha, under_trained_alpha=6.0):
    """Under-trained: pl_alpha > under_trained_alpha (6, WeightWatcher's
    UNDER_TRAINED_THRESH: the ESD is close to a random matrix's). The same option sets
    ``pl_warning``."""
    return under_trained_rule(pl_alpha, under_trained_alpha)


@define(
    outputs=("diag_unreliable_fit", "diag_unreliable_fit_reason"),
    family="diagnosis",
    option_rules={
        "max_pl_ks": _POSITIVE,
        "min_tail_evals": _POSITIVE,
        "max_alpha_sigma": _POSITIVE,
    },
    descriptions={"diag_unreliable_fit_reason": "which of KS, tail size, sigma failed"},
)
def diag_unreliable_fit(
    pl_ks, pl_num_spikes, pl_alpha_sigma, max_pl_ks=0.1, min_tail_evals=10, max_alpha_sigma=0.25
):
    """Unreliable power-law fit: KS distance pl_ks > max_pl_ks, or fewer than
    min_tail_evals eigenvalues in the tail (pl_num_spikes), or the standard error
    pl_alpha_sigma = (alpha - 1) / sqrt(n_tail) > max_alpha_sigma (Clauset, Shalizi & Newman
    2009; WeightWatcher's note "10, really 50" on the tail size). Alpha's rules are then
    read with care."""
    return unreliable_fit_rule(
        pl_ks, pl_num_spikes, pl_alpha_sigma, max_pl_ks, min_tail_evals, max_alpha_sigma
    )


@define(
    outputs=("diag_trap", "diag_trap_reason"),
    family="diagnosis",
    option_rules={"max_traps": _POSITIVE},
    descriptions={"diag_trap_reason": "the randomized ESD's spike count against max_traps"},
)
def diag_trap(num_traps, max_traps=0):
    """Correlation trap: num_traps (spikes of the randomized ESD above its MP bulk) >
    max_traps (Martin & Mahoney 2021, WeightWatcher ``randomize=True``)."""
    return trap_rule(num_traps, max_traps)


@define(
    outputs=("diag_rank_collapse", "diag_rank_collapse_reason"),
    family="diagnosis",
    option_rules={
        "collapse_rank_loss_share": _POSITIVE,
        "collapse_stable_rank_share": _POSITIVE,
    },
    descriptions={"diag_rank_collapse_reason": "vanishing eigenvalues and stable rank"},
)
def diag_rank_collapse(
    weak_rank_loss,
    stable_rank,
    lower_dim,
    collapse_rank_loss_share=0.5,
    collapse_stable_rank_share=0.01,
):
    """Rank collapse: weak_rank_loss / lower_dim >= collapse_rank_loss_share (most
    eigenvalues below WeightWatcher's weak_rank_tol), or stable_rank <
    collapse_stable_rank_share x lower_dim (Rudelson & Vershynin 2007's stable rank far
    below the smaller side)."""
    return rank_collapse_rule(
        weak_rank_loss, stable_rank, lower_dim, collapse_rank_loss_share, collapse_stable_rank_share
    )


def depth_outliers(
    values: Sequence[Any],
    names: Sequence[str],
    outlier_window: int = 3,
    outlier_z: float = 3.5,
    outlier_min_delta: float = 1.0,
) -> list[tuple[str, str]]:
    """Layers whose value stands out from their depth neighbours: ``(name, reason)`` each.

    For each layer (in the given depth order) the neighbours are the up to
    ``outlier_window`` finite values on each side; the layer is an outlier when its modified
    z-score ``0.6745 |x - median| / MAD`` against them exceeds ``outlier_z`` (Iglewicz &
    Hoaglin 1993's 3.5) and ``|x - median| >= outlier_min_delta`` (so a flat neighbourhood,
    MAD ~ 0, does not flag tiny differences). Non-finite values are skipped."""
    pts = [(n, float(v)) for n, v in zip(names, values, strict=True) if _finite(v)]
    out = []
    for i, (name, x) in enumerate(pts):
        lo, hi = max(0, i - outlier_window), i + outlier_window + 1
        neigh = np.array([v for j, (_, v) in enumerate(pts[lo:hi], lo) if j != i])
        if neigh.size < 3:
            continue
        med = float(np.median(neigh))
        mad = float(np.median(np.abs(neigh - med)))
        delta = abs(x - med)
        z = 0.6745 * delta / mad if mad > 0 else math.inf
        if z > outlier_z and delta >= outlier_min_delta:
            zs = "inf" if math.isinf(z) else f"{z:.3g}"
            out.append(
                (
                    name,
                    f"alpha {_f(x)} vs neighbours' median {_f(med)} "
                    f"(modified z {zs} > {_f(outlier_z)})",
                )
            )
    return out


def _finite(v: Any) -> bool:
    try:
        return v is not None and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


@define(
    outputs=("model_diag_num_outliers", "model_diag_outliers"),
    level="model",
    family="diagnosis",
    option_rules={
        "outlier_window": at_least(1),
        "outlier_z": _POSITIVE,
        "outlier_min_delta": _POSITIVE,
    },
    descriptions={
        "model_diag_outliers": "the outlier layers, one 'name: reason' per line",
    },
)
def model_diag_outliers(pl_alpha, slices, outlier_window=3, outlier_z=3.5, outlier_min_delta=1.0):
    """Outlier layers against their depth neighbours: a layer whose pl_alpha has a modified
    z-score above outlier_z (3.5, Iglewicz & Hoaglin 1993) against the up to outlier_window
    layers on each side, in model order, and differs from their median by at least
    outlier_min_delta. model_diag_num_outliers counts them; model_diag_outliers lists them,
    one ``name: reason`` per line ("" if none)."""
    order = sorted(range(len(slices)), key=lambda i: slices[i].index)
    found = depth_outliers(
        [pl_alpha[i] for i in order],
        [slices[i].name for i in order],
        int(outlier_window),
        float(outlier_z),
        float(outlier_min_delta),
    )
    return len(found), "\n".join(f"{n}: {r}" for n, r in found)


def parse_outliers(text: str) -> dict[str, str]:
    """The ``name -> reason`` map stored in ``model_diag_outliers``."""
    out = {}
    for line in (text or "").splitlines():
        name, _, reason = line.partition(": ")
        if name:
            out[name] = reason
    return out


#: each rule as a plain function of values -> (fired, reason)
RULE_FUNCS: Mapping[str, Any] = {
    "over_trained": over_trained_rule,
    "under_trained": under_trained_rule,
    "unreliable_fit": unreliable_fit_rule,
    "trap": trap_rule,
    "rank_collapse": rank_collapse_rule,
}
