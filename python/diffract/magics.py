"""``%load_ext diffract`` and the ``%diffract`` line magic."""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

USAGE = """Work with a diffract store from a cell. Subcommands:

  %diffract open [PATH] [--profile NAME] [--readonly]
        Open (or create) a store: PATH is a store folder (default ./.diffract, profile
        "local"); --profile ram keeps nothing. Returns the Session; later subcommands use it.
  %diffract add EXPR --id ID [--replace]
        Add the model (or checkpoint path) that the Python expression EXPR gives, as ID.
  %diffract compute FIELD... [--models ID...] [--names NAME...] [--types TYPE...] [--wait]
        Compute fields (only those not stored yet) on the selection. In a notebook it runs in
        the background with a progress widget whose Cancel button works (--wait blocks).
  %diffract show FIELD [--kind line|bar|heatmap|scatter|esd] [--y FIELD] [--slice UID] [--models ID...]
        A live panel of a stored field (updates while a computation runs).
  %diffract filter
        The interactive filter builder; its .scope is the chosen selection.
  %diffract runs [PATH]
        The stores under the current folder (or PATH), with their models.
  %diffract export FIELD... --to FILE [--models ...] [--names ...] [--types ...]
        Write the fields as a table: .json, .csv (or .parquet with pandas).

Names and model ids accept re:<regex> (full match). Errors print one line.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"%diffract {self.prog.split()[-1]}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        raise UsageError(message or USAGE)


def _parser() -> argparse.ArgumentParser:
    root = _Parser(prog="%diffract", add_help=False)
    sub = root.add_subparsers(dest="cmd", parser_class=_Parser)
    p = sub.add_parser("open", add_help=False)
    p.add_argument("path", nargs="?")
    p.add_argument("--profile", default=None)
    p.add_argument("--readonly", action="store_true")
    p = sub.add_parser("add", add_help=False)
    p.add_argument("expr", nargs="+")
    p.add_argument("--id", required=True, dest="model_id")
    p.add_argument("--replace", action="store_true")

    def selection(p: argparse.ArgumentParser) -> None:
        p.add_argument("--models", nargs="+")
        p.add_argument("--names", nargs="+")
        p.add_argument("--types", nargs="+")

    p = sub.add_parser("compute", add_help=False)
    p.add_argument("fields", nargs="+")
    selection(p)
    p.add_argument("--wait", action="store_true")
    p = sub.add_parser("show", add_help=False)
    p.add_argument("field")
    p.add_argument("--kind", default="line")
    p.add_argument("--y", default=None)
    p.add_argument("--slice", default=None)
    p.add_argument("--model", default=None)
    selection(p)
    sub.add_parser("filter", add_help=False)
    p = sub.add_parser("runs", add_help=False)
    p.add_argument("path", nargs="?", default=".")
    p = sub.add_parser("export", add_help=False)
    p.add_argument("fields", nargs="+")
    p.add_argument("--to", required=True)
    selection(p)
    return root


@magics_class
class DiffractMagics(Magics):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.session: Any = None

    @line_magic
    def diffract(self, line: str) -> Any:
        try:
            args = _parser().parse_args(shlex.split(line))
        except ValueError as exc:  # unbalanced quotes
            raise UsageError(f"%diffract: {exc}") from None
        if args.cmd is None:
            raise UsageError(
                "%diffract needs a subcommand: open, add, compute, show, filter, runs, export (see %diffract?)"
            )
        try:
            return getattr(self, f"_cmd_{args.cmd}")(args)
        except UsageError:
            raise
        except Exception as exc:  # one clear line, no traceback
            raise UsageError(f"%diffract {args.cmd}: {type(exc).__name__}: {exc}") from None

    diffract.__doc__ = USAGE

    # --- helpers -------------------------------------------------------------------------------
    def _session(self) -> Any:
        if self.session is None:
            raise UsageError("no store is open: run %diffract open [PATH] first")
        return self.session

    def _scope(self, args: argparse.Namespace) -> Any:
        s = self._session()
        if args.models or args.names or args.types:
            return s.filter(model_ids=args.models, param_names=args.names, param_types=args.types)
        return s

    # --- subcommands ---------------------------------------------------------------------------
    def _cmd_open(self, args: argparse.Namespace) -> Any:
        from .session import Session

        profile = args.profile or "local"
        if self.session is not None:
            self.session.close()
        self.session = Session(profile, path=args.path, readonly=args.readonly)
        return self.session

    def _cmd_add(self, args: argparse.Namespace) -> None:
        s = self._session()
        expr = " ".join(args.expr)
        try:
            model = self.shell.ev(expr)
        except Exception as exc:
            raise UsageError(
                f"%diffract add: cannot evaluate {expr!r}: {type(exc).__name__}: {exc}"
            ) from None
        slices = s.models.add(model, args.model_id, replace=args.replace)
        print(f"added {len(slices)} slices as {args.model_id!r}")

    def _cmd_compute(self, args: argparse.Namespace) -> Any:
        scope = self._scope(args)
        from .session import _in_notebook

        if _in_notebook() and not args.wait:
            from .widgets import run_with_progress

            return run_with_progress(scope, *args.fields)
        report = scope.compute.apply(*args.fields, progress=False)
        print(report)
        return None

    def _cmd_show(self, args: argparse.Namespace) -> Any:
        from .widgets import FieldPanel

        scope = self._scope(args)
        fields: list[str] = [args.field] + ([args.y] if args.y else [])
        if args.kind == "esd":
            return FieldPanel(
                scope, "esd", kind="esd", slice=args.slice or args.field, model_id=args.model
            )
        return FieldPanel(scope, fields, kind=args.kind)

    def _cmd_filter(self, args: argparse.Namespace) -> Any:
        from .widgets import FilterBuilder

        return FilterBuilder(self._session())

    def _cmd_runs(self, args: argparse.Namespace) -> Any:
        from .server import find_stores

        root = Path(args.path)
        if not root.is_dir():
            raise UsageError(f"%diffract runs: {args.path} is not a folder")
        stores = find_stores(root)
        return RunsTable(root, stores)

    def _cmd_export(self, args: argparse.Namespace) -> None:
        scope = self._scope(args)
        out = Path(args.to)
        ext = out.suffix.lower()
        if ext == ".json":
            text = scope.results.export_metrics(*args.fields, export_format="json")
            out.write_text(text if isinstance(text, str) else json.dumps(text))
        elif ext == ".csv":
            rows = scope.results.export_metrics(*args.fields, export_format="list")
            with out.open("w", newline="") as fh:
                cols = list(rows[0]) if rows else ["model_id", "name", "uid", "type", *args.fields]
                w = csv.DictWriter(fh, fieldnames=cols)
                w.writeheader()
                for r in rows:
                    w.writerow(
                        {
                            k: (v if not hasattr(v, "tolist") else json.dumps(v.tolist()))
                            for k, v in r.items()
                        }
                    )
        elif ext == ".parquet":
            scope.results.export_metrics(*args.fields, export_format="pandas").to_parquet(out)
        else:
            raise UsageError(
                f"%diffract export: unknown file type {ext or '(none)'!r}; use .json, .csv or .parquet"
            )
        print(f"wrote {', '.join(args.fields)} to {out}")


class RunsTable:
    """What ``%diffract runs`` shows: stores and their models (HTML and text)."""

    def __init__(self, root: Path, stores: list[dict[str, Any]]) -> None:
        from .server import StoreReader

        self.root = root
        self.stores = []
        for s in stores:
            folder = (root / s["path"]).resolve()
            try:
                summary = StoreReader.get(folder).summary()
            except Exception as exc:
                summary = {"models": [], "error": str(exc)}
            self.stores.append({**s, **summary})

    def __repr__(self) -> str:
        if not self.stores:
            return f"no diffract stores under {os.fspath(self.root)}"
        lines = []
        for s in self.stores:
            lines.append(
                f"{s['path'] or '.'}: {len(s['models'])} model(s)"
                + (f" ERROR {s['error']}" if s.get("error") else "")
            )
            for m in s["models"]:
                lines.append(
                    f"  {m['model_id']}: {m['slices']} slices, fields: {', '.join(m['fields']) or '-'}"
                )
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        if not self.stores:
            return (
                f"<p>No diffract stores under <code>{html.escape(os.fspath(self.root))}</code>.</p>"
            )
        rows = []
        for s in self.stores:
            for m in s["models"] or [{"model_id": "(no models)", "slices": 0, "fields": []}]:
                rows.append(
                    f"<tr><td><code>{html.escape(s['path'] or '.')}</code></td><td>{html.escape(m['model_id'])}</td>"
                    f"<td>{m['slices']}</td><td>{html.escape(', '.join(m['fields']))}</td></tr>"
                )
        return (
            "<table class='diffract-runs-table'><tr><th>store</th><th>model</th><th>slices</th><th>fields</th></tr>"
            + "".join(rows)
            + "</table>"
        )


def load_ipython_extension(ipython: Any) -> None:
    ipython.register_magics(DiffractMagics)
