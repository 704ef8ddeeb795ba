"""``diagnosis``: which layers look over-trained, under-trained, trapped, collapsed, badly fit
or out of line with their depth neighbours, read from the stored ``diag_*`` fields.

Besides the figure (a layer x rule grid, each cell's hover the rule's reason), the module
gives the rows and the text summary that ``diffract analyze``, ``%diffract`` and the HTML
report print: :func:`diagnosis_rows`, :func:`diagnosis_lines`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diffract.kernels.diagnosis import MODEL_RULE, RULES, parse_outliers
from diffract.viz._common import field_rows, layout, plain

if TYPE_CHECKING:
    from diffract.session import Scope

#: every rule shown, per-layer rules first, then the model-level outlier rule
ALL_RULES: tuple[str, ...] = (*RULES, MODEL_RULE)

#: the fields a full diagnosis computes (``session.compute.apply(*DIAGNOSIS_FIELDS)``)
DIAGNOSIS_FIELDS: tuple[str, ...] = (
    *(f"diag_{r}" for r in RULES),
    *(f"diag_{r}_reason" for r in RULES),
    "model_diag_num_outliers",
    "model_diag_outliers",
)


def diagnosis_fields(*, traps: bool = True) -> tuple[str, ...]:
    """The fields of a diagnosis; ``traps=False`` leaves out the trap rule, whose randomized
    ESD costs a second decomposition of every slice."""
    return tuple(f for f in DIAGNOSIS_FIELDS if traps or not f.startswith("diag_trap"))


def label(rule: str) -> str:
    """A rule's display name (``over_trained`` -> ``over-trained``)."""
    return rule.replace("_", "-")


def _outliers(scope: Scope) -> tuple[set[str], dict[tuple[str, str], str]]:
    """The models with a stored outlier diagnosis, and ``(model, name) -> reason``."""
    from diffract._errors import DiffractError

    if "model_diag_outliers" not in scope.results.fields():
        return set(), {}  # not computed: asking would log "no computed values" (Diffract's)
    try:
        recs = scope.results.export_aggregates("model_diag_outliers", export_format="list")
    except (DiffractError, ValueError):
        return set(), {}
    checked, out = set(), {}
    for rec in recs:
        models = rec.get("context_models") or []
        model = models[0] if isinstance(models, list | tuple) and models else str(models)
        checked.add(model)
        for name, reason in parse_outliers(str(rec.get("value") or "")).items():
            out[(model, name)] = reason
    return checked, out


def diagnosis_rows(scope: Scope, models: list[str] | None = None) -> list[dict[str, Any]]:
    """One dict per slice with a stored diagnosis: ``model_id``, ``name``, ``uid``, ``type``,
    ``checked`` (the rules with a stored value) and ``findings`` (rule -> reason, the rules
    that fired, in :data:`ALL_RULES` order). Rules not computed are simply not checked.

    Args:
        scope: the session or scope to read.
        models: only these models; default every model of the scope.
    """
    by_uid: dict[str, dict[str, Any]] = {}
    for rule in RULES:
        flag, why = f"diag_{rule}", f"diag_{rule}_reason"
        for r in field_rows(scope, flag, why, complete=True, keep=models or ()):
            if models is not None and r["model_id"] not in models:
                continue
            if r.get(flag) is None:
                continue
            row = by_uid.setdefault(
                r["uid"],
                {
                    "model_id": r["model_id"],
                    "name": r["name"],
                    "uid": r["uid"],
                    "type": r.get("type"),
                    "checked": [],
                    "findings": {},
                },
            )
            row["checked"].append(rule)
            if bool(r[flag]):
                row["findings"][rule] = str(r.get(why) or "")
    checked, outliers = _outliers(scope)
    for row in by_uid.values():
        reason = outliers.get((row["model_id"], row["name"]))
        if row["model_id"] in checked:
            row["checked"].append(MODEL_RULE)
        if reason is not None:
            row["findings"][MODEL_RULE] = reason
    return list(by_uid.values())


def diagnosis_lines(
    scope: Scope, models: list[str] | None = None, *, max_layers: int = 20
) -> list[str]:
    """The text summary: one line of counts per model, then one line per flagged layer
    (``name: over-trained (alpha 1.42 < 2); trap (...)``), at most ``max_layers`` of them
    per model. Empty when no diagnosis is stored."""
    rows = diagnosis_rows(scope, models)
    lines: list[str] = []
    for model in dict.fromkeys(r["model_id"] for r in rows):
        mine = [r for r in rows if r["model_id"] == model]
        counts = {
            rule: sum(rule in r["findings"] for r in mine)
            for rule in ALL_RULES
            if any(rule in r["checked"] for r in mine)
        }
        flagged = [r for r in mine if r["findings"]]
        tally = ", ".join(f"{label(k)} {v}" for k, v in counts.items())
        lines.append(
            f"diagnosis of {model}: {len(flagged)} of {len(mine)} layers flagged ({tally})"
        )
        for r in flagged[:max_layers]:
            what = "; ".join(f"{label(k)} ({v})" for k, v in r["findings"].items())
            lines.append(f"  {r['name']}: {what}")
        if len(flagged) > max_layers:
            lines.append(f"  ... and {len(flagged) - max_layers} more")
    return lines


def diagnosis_spec(scope: Scope, *, models: list[str] | None = None) -> dict[str, Any]:
    """Traces and layout of the ``diagnosis`` figure: a heatmap of layers (rows, in export
    order, ``model · name`` when several models) by rules (columns); 1 where the rule fired,
    0 where it was checked and did not, blank where it was not computed; each cell's hover
    gives the reason when the rule fired."""
    rows = diagnosis_rows(scope, models)
    several = len({r["model_id"] for r in rows}) > 1
    ylabels = [plain(f"{r['model_id']} · {r['name']}" if several else r["name"]) for r in rows]
    z, text = [], []
    for r in rows:
        z.append(
            [
                (1 if rule in r["findings"] else 0) if rule in r["checked"] else None
                for rule in ALL_RULES
            ]
        )
        text.append([plain(r["findings"].get(rule, "")) for rule in ALL_RULES])
    trace = {
        "type": "heatmap",
        "x": [label(k) for k in ALL_RULES],
        "y": ylabels,
        "z": z,
        "text": text,
        "zmin": 0,
        "zmax": 1,
        "showscale": False,
        "colorscale": [[0.0, "rgba(44,160,44,0.35)"], [1.0, "rgba(214,39,40,0.85)"]],
        "xgap": 2,
        "ygap": 2,
        "hovertemplate": "<b>%{y}</b><br>%{x}<br>%{text}<extra></extra>",
    }
    flagged = sum(bool(r["findings"]) for r in rows)
    title = f"diagnosis: {flagged} of {len(rows)} layers flagged"
    # automargin: the margin grows to the longest layer name, so names are whole and the
    # axis title sits outside them
    spec_layout = layout(
        title, "rule", "layer", yaxis={"autorange": "reversed", "automargin": True}
    )
    return {"data": [trace] if rows else [], "layout": spec_layout}
