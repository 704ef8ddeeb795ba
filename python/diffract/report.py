"""``diffract report``: one offline HTML file with a per-layer table, alpha across depth, an
ESD grid and the failures of the run, for readers who do not use notebooks.

The file loads nothing from the network: Plotly's JavaScript (from the ``plotly`` package)
is written into it, and every figure is inline JSON.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from typing import Any

from diffract._vocab.jsonable import to_jsonable

#: ESD panels in the grid at most (spread evenly across depth)
MAX_ESDS = 12
#: models drawn as lines across depth at most; past it the figure is a layer x model
#: heatmap (48 checkpoints are 48 lines nobody can tell apart, and a legend of 48 entries)
MAX_LINES = 8

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1200px;
       padding: 0 16px; color: #1d1d1f; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 32px; }
.meta { color: #555; }
.table-wrap { overflow: auto; max-height: 70vh; border: 1px solid #ddd; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: right; white-space: nowrap; }
th { position: sticky; top: 0; background: #f6f6f6; }
td.text, th.text { text-align: left; }
.failures li { font-family: ui-monospace, monospace; font-size: 13px; }
.none { color: #555; font-style: italic; }
:root { color-scheme: light dark; }
@media (prefers-color-scheme: dark) {
  body { color: #e6e6e6; background: #111; }
  .meta, .none { color: #aaa; }
  .table-wrap, th, td { border-color: #444; }
  th { background: #222; }
}
"""


def fmt(v: Any) -> str:
    """A value as the table shows it (four significant digits, like ``diffract analyze``).

    Args:
        v: a stored value (None when not stored).

    Returns:
        Its text: ``-`` for None, ``nan``, ``%.4g`` for floats, ``str`` otherwise.
    """
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def _cell(v: Any) -> str:
    """A numeric cell: the rounded text, the stored value in full in ``data-value``."""
    if hasattr(v, "item") and getattr(v, "ndim", 0) == 0:
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return f"<td>{html.escape(fmt(v))}</td>"
    full = repr(float(v)) if isinstance(v, float) else str(v)
    return f'<td data-value="{full}" title="{full}">{html.escape(fmt(v))}</td>'


def table_html(rows: Sequence[dict[str, Any]], fields: Sequence[str], *, models: bool) -> str:
    """The per-layer table.

    Args:
        rows: one dict per slice with ``model_id``, ``name``, ``type``, ``shape`` and the fields.
        fields: the field columns, in order.
        models: whether to show a model column (more than one model).

    Returns:
        An HTML ``<table>`` (class ``layers``); each field cell carries its stored value in
        ``data-value``.
    """
    text_cols = (["model_id"] if models else []) + ["name", "type", "shape"]
    head = "".join(f'<th class="text">{c}</th>' for c in text_cols)
    head += "".join(f"<th>{html.escape(f)}</th>" for f in fields)
    body = []
    for r in rows:
        cells = "".join(
            f'<td class="text">{html.escape(str(r.get(c, "")))}</td>' for c in text_cols
        )
        cells += "".join(_cell(r.get(f)) for f in fields)
        body.append(f"<tr>{cells}</tr>")
    return (
        '<div class="table-wrap"><table class="layers"><thead><tr>'
        + head
        + "</tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table></div>"
    )


def failures_html(failures: Sequence[Any] | None) -> str:
    """The failures section's body.

    Args:
        failures: the run's :class:`~diffract.run.report.Failure` list, or None when no run
            was made (a store read as it is).

    Returns:
        HTML: a list of ``model:name [field] error`` lines, or a sentence saying there were none.
    """
    if failures is None:
        return (
            '<p class="none">No run was made: this report reads a store as it is, and a store '
            "does not keep the failures of past runs.</p>"
        )
    if not failures:
        return '<p class="none">No failures.</p>'
    items = "".join(
        f"<li><b>{html.escape(f.model_id)}:{html.escape(f.name)}</b> [{html.escape(f.field)}] "
        f"{html.escape(f.error)}</li>"
        for f in failures
    )
    return f'<ul class="failures">{items}</ul>'


def _spread(items: Sequence[Any], n: int) -> list[Any]:
    """At most ``n`` of ``items``, evenly spaced (first and last kept)."""
    if len(items) <= n:
        return list(items)
    if n == 1:
        return [items[0]]
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def _has_esd(scope: Any, uid: str) -> bool:
    from diffract._errors import FieldNotComputedError, UnknownFieldError

    try:
        return scope.results.get("esd", uid) is not None
    except (FieldNotComputedError, UnknownFieldError, KeyError):
        return False


def _figure_div(div_id: str, spec: dict[str, Any]) -> str:
    data = to_jsonable(spec, where="figure", other="str")
    text = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    config = '{"displaylogo":false,"responsive":true}'
    return (
        f'<div id="{div_id}" class="figure"></div><script>'
        f"(function(){{var f={text};Plotly.newPlot({json.dumps(div_id)},f.data,f.layout,{config});}})();"
        "</script>"
    )


def figures(scope: Any, *, alpha_field: str = "pl_alpha", max_esds: int = MAX_ESDS) -> str:
    """The figures of the report: the alpha field across depth, every figure kind the registry
    marks for the report (:attr:`diffract.viz.registry.FigureKind.report`) and a grid of
    stored ESDs.

    Args:
        scope: the session or scope to draw.
        alpha_field: the field drawn across depth (skipped when nothing of it is stored).
        max_esds: ESD panels at most (spread evenly across the slices with a stored ESD).

    Returns:
        HTML: the alpha and ESD sections, each a figure or a sentence saying what is missing,
        and a section per report kind with something stored.
    """
    from diffract.viz import registry

    depth = registry.build(scope, "layers", alpha_field)
    lines = [t for t in depth["data"] if t["y"]]
    if len(lines) > MAX_LINES:
        heat = registry.build(scope, "heatmap", alpha_field)
        alpha = (
            f'<p class="meta">{len(lines)} models: one row each (too many for lines).</p>'
            + _figure_div("alpha-depth", _fit_rows(heat, len(lines)))
        )
    elif lines:
        alpha = _figure_div("alpha-depth", depth)
    else:
        alpha = f'<p class="none">No {html.escape(alpha_field)} values are stored.</p>'
    extra = "".join(_kind_section(scope, k) for k in registry.KINDS.values() if k.report)
    with_esd = [s for s in scope.models.slices() if _has_esd(scope, s.uid)]
    if with_esd:
        chosen = _spread(with_esd, max_esds)
        grid = registry.build(scope, "esd_grid", slices=[s.uid for s in chosen])
        esd = (
            f'<p class="meta">{len(chosen)} of the {len(with_esd)} slices with a stored ESD, '
            "spread across depth.</p>" + _figure_div("esd-grid", grid)
        )
    else:
        esd = '<p class="none">No ESD is stored (compute a spectral field such as pl_alpha).</p>'
    return f"<h2>{html.escape(alpha_field)} across depth</h2>{alpha}{extra}<h2>ESD grid</h2>{esd}"


def _fit_rows(spec: dict[str, Any], rows: int) -> dict[str, Any]:
    """A heatmap tall enough for ``rows`` readable rows."""
    layout = {**spec["layout"], "height": max(360, 18 * rows + 160)}
    return {"data": spec["data"], "layout": layout}


def _kind_section(scope: Any, kind: Any) -> str:
    """A section for a figure kind the registry marks for the report (drawn with its default
    fields), or nothing while none of its values is stored."""
    from diffract._errors import DiffractError
    from diffract.viz import registry

    try:
        spec = registry.build(scope, kind.name)
    except DiffractError:  # e.g. a field this session's kernels do not produce
        return ""
    if not any(t.get("y") or t.get("z") for t in spec["data"]):
        return ""
    title = html.escape(kind.title[:1].upper() + kind.title[1:])
    return f"<h2>{title}</h2>" + _figure_div(f"figure-{kind.name}", spec)


def diagnosis_html(scope: Any) -> str:
    """The report's diagnosis section: per model the count of flagged layers, a list of them
    with each rule's reason, and the ``diagnosis`` figure; "" while no ``diag_*`` field is
    stored."""
    from diffract.viz import registry
    from diffract.viz.kinds.diagnosis import diagnosis_rows, label

    rows = diagnosis_rows(scope)
    if not rows:
        return ""
    items = []
    for r in rows:
        if not r["findings"]:
            continue
        what = "; ".join(
            f"<b>{html.escape(label(k))}</b> ({html.escape(v)})" for k, v in r["findings"].items()
        )
        items.append(f"<li>{html.escape(r['model_id'])} · {html.escape(r['name'])}: {what}</li>")
    flagged = len(items)
    head = f'<p class="meta">{flagged} of {len(rows)} layers flagged by the rules.</p>'
    listing = f"<ul>{''.join(items)}</ul>" if items else '<p class="none">No layer flagged.</p>'
    spec = registry.build(scope, "diagnosis")
    return f"<h2>Diagnosis</h2>{head}{listing}" + _figure_div("figure-diagnosis", spec)


def build_html(
    scope: Any,
    rows: Sequence[dict[str, Any]],
    fields: Sequence[str],
    *,
    title: str,
    summary: str,
    failures: Sequence[Any] | None,
    max_esds: int = MAX_ESDS,
) -> str:
    """The whole report as one HTML document that needs no network.

    Args:
        scope: the session or scope the figures are drawn from.
        rows: the per-layer table's rows (see :func:`table_html`).
        fields: the table's field columns.
        title: the page title (the checkpoint or store).
        summary: one line under the title (what was computed, where it is stored).
        failures: the run's failures, or None when no run was made.
        max_esds: ESD panels at most.

    Returns:
        The HTML text.
    """
    from plotly.offline import get_plotlyjs

    models = len({r.get("model_id") for r in rows}) > 1
    alpha = "pl_alpha" if "pl_alpha" in fields or not fields else fields[0]
    body = (
        f"<h1>diffract report: {html.escape(title)}</h1>"
        f'<p class="meta">{html.escape(summary)}</p>'
        + diagnosis_html(scope)
        + f"<h2>Per-layer table ({len(rows)} layers)</h2>"
        + table_html(rows, fields, models=models)
        + figures(scope, alpha_field=alpha, max_esds=max_esds)
        + f"<h2>Failures</h2>{failures_html(failures)}"
    )
    plotly_js = get_plotlyjs().replace("</script", "<\\/script")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>diffract report: {html.escape(title)}</title>"
        f"<style>{_STYLE}</style><script>{plotly_js}</script></head>"
        f"<body>{body}</body></html>"
    )


#: the diff table's numeric columns, in order (``update_kind`` shows as the type column)
DIFF_COLUMNS = (
    "change_rank",
    "rel_change",
    "norm_ratio",
    "signal_rank",
    "signal_share",
    "effective_rank",
    "stable_rank",
    "noise_sigma",
    "bulk_ks",
    "subspace_overlap",
)


def diff_report_html(result: Any) -> str:
    """The fine-tune diff as one offline HTML page: the summary, the ``diff`` figure and the
    per-layer table, with Plotly written in (as ``diffract report``'s page)."""
    from plotly.offline import get_plotlyjs

    from diffract.viz.kinds.diff import diff_figure

    title = f"{result.tuned} vs {result.base}"
    rows = [{**r, "type": r["update_kind"]} for r in result.ranked()]
    summary = "".join(f"<p>{html.escape(line)}</p>" for line in result.text().splitlines())
    skipped = "".join(
        f"<li>{html.escape(n)}: {html.escape(why)}</li>" for n, why in result.skipped.items()
    )
    body = (
        f"<h1>diffract diff: {html.escape(title)}</h1>"
        f'<p class="meta">base {html.escape(result.base)}, tuned {html.escape(result.tuned)}; '
        f"thresholds {html.escape(json.dumps(result.options))} (docs: finetune-diff)</p>"
        f"<h2>Summary</h2>{summary}"
        "<h2>What changed per layer</h2>"
        + _figure_div("figure-diff", diff_figure(result))
        + f"<h2>Layers, most changed first ({len(rows)})</h2>"
        + table_html(rows, DIFF_COLUMNS, models=False)
        + (f"<h2>Not compared</h2><ul>{skipped}</ul>" if skipped else "")
    )
    plotly_js = get_plotlyjs().replace("</script", "<\\/script")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>diffract diff: {html.escape(title)}</title>"
        f"<style>{_STYLE}</style><script>{plotly_js}</script></head>"
        f"<body>{body}</body></html>"
    )
