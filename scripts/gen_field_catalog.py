"""Generate docs/fields.md from the kernel registry (the built-in field library).

    .venv/bin/python scripts/gen_field_catalog.py          # write docs/fields.md
    .venv/bin/python scripts/gen_field_catalog.py --check  # exit 1 if docs/fields.md is stale

tests/kernels/test_fields_catalog.py runs the check.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "fields.md"

#: WeightWatcher 0.7.7 analyze() column -> our field (see tests/kernels/test_fields_golden.py)
WW_MAP = [
    ("alpha", "pl_alpha", ""),
    ("xmin", "pl_esd_xmin", "x esd_ww_ratio (1 with esd_scale='ww')"),
    ("xmax", "pl_esd_xmax", "x esd_ww_ratio"),
    ("D", "pl_ks", ""),
    ("sigma", "pl_alpha_sigma", ""),
    ("num_pl_spikes", "pl_num_spikes", ""),
    (
        "Lambda (TPL fit)",
        "tpl_lambda",
        "related only: ours at the power-law xmin, WW's own xmin and alpha in [0, 3]",
    ),
    ("warning", "pl_warning", ""),
    ("lambda_max", "esd_max", "x esd_ww_ratio"),
    ("spectral_norm", "esd_max", "x esd_ww_ratio (WW's is lambda_max, not s_max)"),
    ("norm", "esd_norm", "x esd_ww_ratio"),
    ("log_norm", "esd_log_norm", "esd_scale='ww' (= layer_log_norm for 2-D)"),
    ("log_spectral_norm", "esd_log_max", "esd_scale='ww' (= layer_log_spectral_norm for 2-D)"),
    ("alpha_weighted", "pl_alpha_weighted", "esd_scale='ww'"),
    ("log_alpha_norm", "pl_log_alpha_norm", "esd_scale='ww'"),
    ("stable_rank", "stable_rank", ""),
    ("matrix_rank", "hard_rank", ""),
    ("rank_loss", "rank_loss", ""),
    ("weak_rank_loss", "weak_rank_loss", "option weak_rank_tol = WW tolerance"),
    ("entropy", "matrix_entropy", ""),
    ("num_evals", "num_evals", ""),
    ("sv_max", "max_weights_sval", "x sqrt(1/2) for Conv2d (WW conv2d_norm)"),
    ("sv_min", "min_weights_sval", "Conv2d: max_kernel_min_sval x sqrt(1/2)"),
    (
        "N, M, rf, Q",
        "greater_dim, lower_dim, receptive_field, aspect_ratio",
        "WW swaps N/M for Conv2d with out < in and an even number of kernel positions",
    ),
    ("max_rand_eval", "esd_rand_max", "x esd_ww_ratio; ours seeded; Conv: see weights_rand"),
    ("rand_distance", "js_rand_distance", "same formula; WW unseeded; Conv: see weights_rand"),
    ("ww_softrank", "rand_soft_rank", ""),
    ("ww_maxdist", "rand_max_dist", "x esd_ww_ratio"),
    ("mp_softrank", "mp_soft_rank", "ours: MP edge from the entry variance"),
    (
        "num_fingers, raw_alpha (fix_fingers)",
        "pl_num_fingers, pl_raw_alpha",
        "options fix_fingers, xmax",
    ),
    (
        "sigma_mp, num_spikes, mp_softrank, bulk_max, bulk_min, W_scale (mp_fit=True)",
        "mp_fit_sigma, mp_fit_num_spikes, mp_fit_soft_rank, mp_fit_bulk_max, mp_fit_bulk_min, "
        "mp_fit_w_scale",
        "edges and W_scale with esd_scale='ww'",
    ),
    (
        "rand_sigma_mp, rand_num_spikes, num_traps, rand_mp_softrank, rand_bulk_max, "
        "rand_bulk_min, rand_W_scale (randomize=True)",
        "rand_mp_fit_sigma, rand_mp_fit_num_spikes, num_traps, rand_mp_fit_soft_rank, "
        "rand_mp_fit_bulk_max, rand_mp_fit_bulk_min, rand_mp_fit_w_scale",
        "in distribution: WW permutes unseeded",
    ),
    (
        "skipped layers (min_evals, max_evals, max_N, layer types)",
        "spectrum_gate",
        "not applicable with the reason; conventions='weightwatcher'",
    ),
    (
        "detX_num = num_ERG_spikes, detX_val, detX_val_unrescaled, ERG_gap (detX=True)",
        "detx_num_spikes, detx_esd_val, detx_rescaled_val, erg_gap",
        "detX_val with esd_scale='ww'",
    ),
    (
        "<bulk|tail>_<mean|var>_<vec_entropy|loc_ratio|part_ratio> (vectors=True)",
        "<metric>_<bulk|tail>_<mean|var>",
        "",
    ),
    ("deltaEs (deltas=True, plotted only)", "esd_deltas, level_spacing_ratio", ""),
    ("summary mp_softrank (mp_fit=True)", "model_mp_fit_soft_rank", "per model"),
    ("summary log_norm, log_spectral_norm", "model_esd_log_norm, model_esd_log_max", "per model"),
    (
        "summary alpha, alpha_weighted, log_norm, log_spectral_norm, log_alpha_norm, stable_rank",
        "model_pl_alpha, model_pl_alpha_weighted, log_norm, log_spectral_norm, model_pl_alpha_norm, "
        "model_stable_rank",
        "per model",
    ),
]

LEVEL_NAMES = {"param": "per parameter", "model": "per model", "cross": "across models"}


def _esc(text: str) -> str:
    """``text`` with its pipes escaped, so that it stays in one table cell."""
    return text.replace("|", "\\|")


def _names(text: str, anchors: dict[str, str]) -> str:
    """A table cell listing names: each name as code (a field linked to its kernel's
    section), words with spaces, a leading "summary" and a trailing "(options)" as text."""
    head, paren, rest = text.partition(" (")
    prefix = ""
    if head.startswith("summary "):
        prefix, head = "summary ", head[len("summary ") :]
    cells = []
    for name in head.split(", "):
        if " " in name:
            cells.append(_esc(name))
        elif name in anchors:
            cells.append(f"[`{name}`](#{anchors[name]})")
        else:
            cells.append(f"`{name}`")  # a pipe inside a code span does not split the cell
    return prefix + ", ".join(cells) + (_esc(f" ({rest}") if paren else "")


def _ww_rows(anchors: dict[str, str]) -> list[str]:
    """The rows of the WeightWatcher column map (names as code, fields linked)."""
    return [
        f"| {_names(ww, {})} | {_names(ours, anchors)} | {_esc(note)} |"
        for ww, ours, note in WW_MAP
    ]


def render() -> str:
    try:
        import diffract  # noqa: F401
    except ImportError:  # pragma: no cover
        sys.path.insert(0, str(ROOT / "python"))
    from diffract.kernels import FAMILIES, builtin_kernels

    kernels = builtin_kernels()
    fields = sorted(o for k in kernels for o in k.outputs)
    by_field = {o: k for k in kernels for o in k.outputs}
    lines = [
        "# Field catalog",
        "",
        "<!-- generated by scripts/gen_field_catalog.py from the kernel registry; do not edit -->",
        "",
        f"{len(fields)} fields from {len(kernels)} kernels in {len(FAMILIES)} modules "
        f"({', '.join(FAMILIES)}).",
        "",
        "Conventions: a slice with ndim >= 3 is read in PyTorch layout (out, in, *kernel) and cut",
        "into prod(kernel) kernel-position matrices of shape (out, in), whose spectra are pooled",
        "(WeightWatcher's Conv2d treatment; also used for Conv1d/Conv3d). N / M = larger / smaller",
        "dimension of one such matrix; s_i singular values; ESD eigenvalues lambda_i = c s_i^2 with",
        "c = 1/N by default (option esd_scale). Transient fields are kept in memory during a run",
        "and stored only when asked for by name. A failure on one parameter raises with a reason.",
        "",
        "Defects of WeightWatcher not copied: a failed fit raises with its reason (WW: alpha=-1",
        "silently); 3-D weights (Conv1d) are cut into kernel-position matrices (WW runs a batched",
        "SVD over the first axis); randomization is seeded (option seed); importing diffract",
        "changes no global logging or warning state.",
        "",
        "## WeightWatcher columns",
        "",
        "| WeightWatcher | field | note |",
        "|---|---|---|",
        *_ww_rows({f: k.name for f, k in by_field.items()}),
        "",
        "## Index",
        "",
        "| field | kernel | level | module |",
        "|---|---|---|---|",
    ]
    for f in fields:
        k = by_field[f]
        lines.append(
            f"| `{f}` | [{k.name}](#{k.name}) | {k.level} | {k.func.__module__.rsplit('.', 1)[-1]} |"
        )
    lines.append("")
    for module in FAMILIES:
        ks = [k for k in kernels if k.func.__module__.rsplit(".", 1)[-1] == module]
        if not ks:
            continue
        lines += [f"## Module `{module}`", ""]
        for k in ks:
            sig = ", ".join(k.inputs)
            lines += [f"### {k.name}", ""]
            lines.append(f"- outputs: {', '.join(f'`{o}`' for o in k.outputs)}")
            lines.append(f"- inputs: `{k.name}({sig})`")
            if k.options:
                opts = ", ".join(f"`{n}={v!r}`" for n, v in k.options.items())
                lines.append(f"- options: {opts}")
            lines.append(f"- level: {k.level} ({LEVEL_NAMES[k.level]}); family: {k.family}")
            extra = []
            if k.min_ndim:
                extra.append(f"applies to slices with ndim >= {k.min_ndim}")
            if k.transient:
                extra.append("transient: " + ", ".join(f"`{t}`" for t in sorted(k.transient)))
            if k.streamed:
                extra.append("vectorized, streamed (one call per chunk, results as they come)")
            elif k.vectorized:
                extra.append("vectorized (one call per batch of slices)")
            if extra:
                lines.append("- " + "; ".join(extra))
            lines += ["", inspect.cleandoc(k.doc) if k.doc else "(undocumented)", ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is stale: run python scripts/gen_field_catalog.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
