"""``%load_ext diffract`` and the ``%diffract`` line magic."""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from diffract._core.csv_cells import safe_cell

USAGE = """Work with a diffract store from a cell. Subcommands:

  %diffract open [PATH] [--profile NAME] [--readonly]
        Open (or create) a store: PATH is a store folder (default: the configured profile's,
        ./.diffract for "local"); --profile ram keeps nothing. Returns the Session; later
        subcommands use it. If opening fails, the previous session stays open and in use.
        A notebook Session that already has the store open for writing is used as it is.
  %diffract use NAME
        Use the notebook's Session in variable NAME. Without open or use, the subcommands
        below use the notebook's Session (the most recently defined one, if there are several).
  %diffract add EXPR --id ID [--replace]
        Add a model as ID: EXPR is a checkpoint file or folder ("ckpt.safetensors", quoted
        or not), or a Python expression evaluated in the notebook (a dict of arrays, a model).
  %diffract compute FIELD... [--models ID...] [--names NAME...] [--types TYPE...] [--wait]
        Compute fields (only those not stored yet) on the selection. In a notebook it runs in
        the background with a progress widget whose Cancel button works (--wait blocks).
  %diffract show FIELD [--kind line|bar|heatmap|scatter|esd|compare|evolution] [--y FIELD] [--slice UID] [--mode difference|ratio] [--run NAME] [--models ID...] [--names NAME...] [--types TYPE...]
        A live panel of a stored field (updates while a computation runs). --kind esd
        shows one parameter's spectrum and needs --slice UID (its uid or name; --models ID
        when the name is in several models); --kind compare --models A B draws B - A (or
        B / A with --mode ratio) per slice; --kind evolution draws a tracked run (--run NAME)
        layer x training step.
  %diffract diagnose [--traps] [--models ID...] [--names NAME...] [--types TYPE...]
        Compute the diagnosis fields (diag_*, docs/diagnosis.md) not stored yet and print
        which layers look over-trained, under-trained, collapsed, badly fit or out of line
        with their neighbours, each with its reason; --traps also checks correlation traps.
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
        sub = self.prog.split()[-1]
        prefix = "%diffract" if sub == "%diffract" else f"%diffract {sub}"
        raise UsageError(f"{prefix}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        raise UsageError(message or USAGE)


def _parser() -> argparse.ArgumentParser:
    root = _Parser(prog="%diffract", add_help=False)
    sub = root.add_subparsers(dest="cmd", parser_class=_Parser)
    p = sub.add_parser("open", add_help=False)
    p.add_argument("path", nargs="?")
    p.add_argument("--profile", default=None)
    p.add_argument("--readonly", action="store_true")
    p = sub.add_parser("use", add_help=False)
    p.add_argument("name")
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
    p.add_argument("--mode", default="difference")
    p.add_argument("--run", default=None)
    selection(p)
    # the spelling of the 0.x docs; one model id, added to --models (not in the help)
    p.add_argument("--model", action="append", dest="models", help=argparse.SUPPRESS)
    p = sub.add_parser("diagnose", add_help=False)
    p.add_argument("--traps", action="store_true")
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
    """The ``%diffract`` line magic (registered by ``%load_ext diffract``).

    Args:
        shell: the IPython shell.
    """

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.session: Any = None
        #: the user variable ``self.session`` came from (None: opened by ``%diffract open``)
        self.source: str | None = None

    @line_magic
    def diffract(self, line: str) -> Any:
        try:
            args = _parser().parse_args(shlex.split(line))
        except ValueError as exc:  # unbalanced quotes
            raise UsageError(f"%diffract: {exc}") from None
        if args.cmd is None:
            raise UsageError(
                "%diffract needs a subcommand: open, use, add, compute, show, diagnose, filter, "
                "runs, export (see %diffract?)"
            )
        if args.cmd == "add":
            args.raw_expr = _raw_add_expr(line)
        try:
            return getattr(self, f"_cmd_{args.cmd}")(args)
        except UsageError:
            raise
        except Exception as exc:  # one clear line, no traceback
            raise UsageError(f"%diffract {args.cmd}: {type(exc).__name__}: {exc}") from None

    diffract.__doc__ = USAGE

    # --- helpers -------------------------------------------------------------------------------
    def _user_ns(self) -> dict[str, Any]:
        shell = self.shell
        if shell is None:  # registered magics always have one
            raise UsageError("%diffract runs in an IPython shell")
        return shell.user_ns

    def _session(self) -> Any:
        """The session the subcommands use: the one ``open`` or ``use`` chose, else the
        notebook's own Session (announced once, with the others found)."""
        if self.source is not None and self._user_ns().get(self.source) is not self.session:
            self.session, self.source = None, None  # the variable was rebound or deleted
        if self.session is not None and _superseded(self.session):
            newer = self._notebook_writer(self.session.store.path)
            if newer is not None:  # a notebook Session took this store's writer lock over
                self.session, self.source = newer[1], newer[0]
                print(f"%diffract: {newer[0]!r} took this store's writer lock over; using it")
        if self.session is None:
            found = _notebook_sessions(self._user_ns())
            if not found:
                raise UsageError(
                    "no store is open: run %diffract open [PATH] first (or create a Session "
                    "in the notebook, or pick one with %diffract use NAME)"
                )
            name, session = found[-1]
            self.session, self.source = session, name
            others = [n for n, _ in found[:-1]]
            also = (
                f"; also found {', '.join(others)} (the most recently defined is used; "
                "%diffract use NAME picks another)"
                if others
                else ""
            )
            print(f"%diffract: using the notebook's Session {name!r} ({_describe(session)}){also}")
        return self.session

    def _scope(self, args: argparse.Namespace) -> Any:
        s = self._session()
        if args.models or args.names or args.types:
            return s.filter(model_ids=args.models, param_names=args.names, param_types=args.types)
        return s

    # --- subcommands ---------------------------------------------------------------------------
    def _cmd_use(self, args: argparse.Namespace) -> Any:
        found = dict(_notebook_sessions(self._user_ns()))
        if args.name not in found:
            what = (
                "is not defined"
                if args.name not in self._user_ns()
                else f"is a {type(self._user_ns()[args.name]).__name__}, not a Session"
            )
            have = ", ".join(found) or "none"
            raise UsageError(f"%diffract use: {args.name!r} {what}; notebook Sessions: {have}")
        self.session, self.source = found[args.name], args.name
        note = ""
        if _superseded(self.session):
            note = (
                "; note: it can only read now, since a newer session of this kernel took its "
                "writer lock over (close that one and reopen this store to write here)"
            )
        print(f"%diffract: using {args.name!r} ({_describe(self.session)}){note}")
        return self.session

    def _cmd_open(self, args: argparse.Namespace) -> Any:
        from diffract._core.config import resolve
        from diffract.store import BACKENDS

        old = self.session
        kept = (
            f"; the previous session ({_describe(old)}) stays open and in use"
            if old is not None
            else ""
        )
        # check the configuration first: a bad profile or path leaves the open session alone
        try:
            with warnings.catch_warnings():  # Session(...) below warns once, if need be
                warnings.simplefilter("ignore")
                cfg = resolve(profile=args.profile, path=args.path, backends=BACKENDS)
        except Exception as exc:
            raise UsageError(f"%diffract open: {type(exc).__name__}: {exc}{kept}") from None
        if not args.readonly:
            writer = self._notebook_writer(cfg["path"])
            if writer is not None:  # never a second writer beside the user's own session
                name, session = writer
                self.session, self.source = session, name
                print(
                    f"%diffract open: the notebook's Session {name!r} already has this store "
                    "open for writing; using it"
                )
                return session
        # the same store, open for writing, must be released first (its writer lock)
        same = (
            old is not None
            and not old.readonly
            and not args.readonly
            and _same_store(old.store.path, cfg["path"])
            and not _in_namespace(old, self._user_ns())
        )
        if same:
            old.close()
        try:
            self.session = _open_session(args)
            self.source = None
        except Exception as exc:
            if same:
                try:
                    self.session = _reopen(old)
                except Exception as exc2:
                    self.session = None
                    raise UsageError(
                        f"%diffract open: {type(exc).__name__}: {exc}; the previous session "
                        f"({_describe(old)}) was closed and could not be reopened "
                        f"({type(exc2).__name__}: {exc2}): run %diffract open again"
                    ) from None
                kept = f"; the previous session ({_describe(old)}) was reopened and stays in use"
            raise UsageError(f"%diffract open: {type(exc).__name__}: {exc}{kept}") from None
        if old is not None and not same and not _in_namespace(old, self._user_ns()):
            old.close()  # ours alone; a session the notebook holds stays open
        return self.session

    def _notebook_writer(self, path: Any) -> tuple[str, Any] | None:
        """The notebook's Session (variable name, session) writing to the store at ``path``."""
        for name, session in reversed(_notebook_sessions(self._user_ns())):
            if (
                not session.readonly
                and not _superseded(session)
                and _same_store(session.store.path, path)
            ):
                return name, session
        return None

    def _cmd_add(self, args: argparse.Namespace) -> None:
        s = self._session()
        model, what = self._model_from(args)
        try:
            slices = s.models.add(model, args.model_id, replace=args.replace)
        except Exception as exc:
            raise UsageError(
                f"%diffract add: cannot add {what} as {args.model_id!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        print(f"added {len(slices)} slices as {args.model_id!r}")

    def _model_from(self, args: argparse.Namespace) -> tuple[Any, str]:
        """What ``%diffract add ARG`` adds: a checkpoint path or the value of a Python
        expression, and how to name it in an error.

        ARG names a path when it is an existing file or folder (unless it is also a variable
        of the user namespace); otherwise it is evaluated in the user namespace (quotes kept
        as typed, so ``"ckpt.safetensors"`` is a string). When evaluation fails and ARG looks
        like a path (a folder separator, ``~`` or a file suffix), it is used as a path."""
        text = " ".join(args.expr)  # quotes removed, as a shell would
        expr = getattr(args, "raw_expr", None) or text  # as typed, quotes kept
        user_ns = self.shell.user_ns
        if not (text.isidentifier() and text in user_ns):
            for cand in (text, _string_literal(text)):
                if cand and Path(cand).expanduser().exists():
                    return str(Path(cand).expanduser()), f"the checkpoint {cand!r}"
        try:
            value = self.shell.ev(expr)
        except Exception as exc:
            if _looks_like_path(text):
                return str(Path(text).expanduser()), f"the checkpoint {text!r}"
            raise UsageError(
                f"%diffract add: cannot evaluate {expr!r} (neither an existing file or folder "
                f"nor a Python expression): {type(exc).__name__}: {exc}"
            ) from None
        if isinstance(value, (str, os.PathLike)):
            return value, f"the checkpoint {os.fspath(value)!r}"
        return value, repr(expr)

    def _cmd_compute(self, args: argparse.Namespace) -> Any:
        scope = self._scope(args)
        from diffract.session.compute import in_notebook as _in_notebook

        if _in_notebook() and not args.wait:
            from diffract.widgets import run_with_progress

            return run_with_progress(scope, *args.fields)
        report = scope.compute.apply(*args.fields, progress=False)
        print(report)
        return None

    def _cmd_show(self, args: argparse.Namespace) -> Any:
        from diffract.widgets import FieldPanel

        scope = self._scope(args)
        fields: list[str] = [args.field] + ([args.y] if args.y else [])
        if args.kind == "esd":
            slice_ = args.slice
            if slice_ is None:
                if args.field == "esd" or self._session().registry.has_field(args.field):
                    raise UsageError(
                        "%diffract show: --kind esd needs --slice UID (the uid or name of the "
                        "parameter whose spectrum to show, and --models ID if the name is in "
                        "several models), e.g. %diffract show esd --kind esd --slice "
                        "layers.0.weight"
                    )
                slice_ = args.field  # `show layers.0.weight --kind esd`: FIELD names the slice
            model_id = args.models[0] if args.models and len(args.models) == 1 else None
            return FieldPanel(scope, "esd", kind="esd", slice=slice_, model_id=model_id)
        if args.kind == "compare":
            return FieldPanel(scope, fields, kind="compare", models=args.models, mode=args.mode)
        if args.kind == "evolution":
            return FieldPanel(scope, fields, kind="evolution", run=args.run)
        return FieldPanel(scope, fields, kind=args.kind)

    def _cmd_diagnose(self, args: argparse.Namespace) -> None:
        from diffract.viz.kinds.diagnosis import diagnosis_fields, diagnosis_lines

        scope = self._scope(args)
        report = scope.compute.apply(*diagnosis_fields(traps=args.traps), progress=False)
        print(report)
        print("\n".join(diagnosis_lines(scope) or ["diagnosis: nothing to diagnose"]))

    def _cmd_filter(self, args: argparse.Namespace) -> Any:
        from diffract.widgets import FilterBuilder

        session = self._session()
        # "copy as code" names the notebook's variable when the session came from one
        return FilterBuilder(session, source_name=self.source or "session")

    def _cmd_runs(self, args: argparse.Namespace) -> Any:
        from diffract.store.reader import find_stores

        root = Path(args.path)
        if not root.is_dir():
            raise UsageError(f"%diffract runs: {args.path} is not a folder")
        stores = find_stores(root)
        return RunsTable(root, stores)

    def _cmd_export(self, args: argparse.Namespace) -> None:
        from diffract.store import atomic_write_text

        scope = self._scope(args)
        out = Path(args.to)
        ext = out.suffix.lower()
        if ext == ".json":
            text = scope.results.export_table(*args.fields, export_format="json")
            atomic_write_text(out, text if isinstance(text, str) else json.dumps(text))
        elif ext == ".csv":
            rows = scope.results.export_table(*args.fields, export_format="list")
            atomic_write_text(out, _csv_text(rows, args.fields), newline="")
        elif ext == ".parquet":
            scope.results.export_table(*args.fields, export_format="pandas").to_parquet(out)
        else:
            raise UsageError(
                f"%diffract export: unknown file type {ext or '(none)'!r}; use .json, .csv or .parquet"
            )
        print(f"wrote {', '.join(args.fields)} to {out}")


def _raw_add_expr(line: str) -> str | None:
    """The expression of ``add EXPR --id ID [--replace]`` as typed (quotes kept), or None."""
    try:
        tokens = shlex.split(line, posix=False)[1:]
    except ValueError:
        return None
    out: list[str] = []
    skip = False
    for tok in tokens:
        if skip:
            skip = False
            continue
        if tok.startswith("--") and len(tok) > 2:
            name, eq, _ = tok[2:].partition("=")
            if "id".startswith(name):
                skip = not eq
                continue
            if "replace".startswith(name):
                continue
        out.append(tok)
    return " ".join(out) or None


def _string_literal(text: str) -> str | None:
    """The string a Python string literal such as ``"ckpt.npz"`` spells, else None."""
    import ast

    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, str) else None


def _looks_like_path(text: str) -> bool:
    from diffract.extract import checkpoint_suffixes  # the files models.add reads

    return (
        "/" in text
        or os.sep in text
        or text.startswith(("~", "."))
        or text.lower().endswith(checkpoint_suffixes())
    )


def _open_session(args: argparse.Namespace) -> Any:
    """``Session(...)`` for ``%diffract open``; a warning it gives (a writer lock taken over
    from another session of this kernel) is printed in plain words, without a source line."""
    from diffract.session import Session

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = Session(args.profile, path=args.path, readonly=args.readonly)
    notes = [str(w.message) for w in caught]
    if getattr(session.store, "took_over", False):
        notes.append(
            f"another session of this kernel had {_describe(session)} open for writing; "
            "the new session took its writer lock over, so the earlier one can only read "
            "now (close sessions you replace)"
        )
    for text in notes:
        print(f"%diffract open: note: {text}", file=sys.stderr)
    return session


def _notebook_sessions(user_ns: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The Sessions the notebook holds in variables, in the order they were first defined
    (IPython's ``_``, ``_1``... output caches left out)."""
    from diffract.session import Session

    return [
        (name, value)
        for name, value in list(user_ns.items())
        if not name.startswith("_") and isinstance(value, Session)
    ]


def _in_namespace(session: Any, user_ns: Mapping[str, Any]) -> bool:
    return any(value is session for _, value in _notebook_sessions(user_ns))


def _superseded(session: Any) -> bool:
    """Whether a newer session of this process took ``session``'s writer lock over."""
    return bool(getattr(session.store, "superseded", False))


def _describe(session: Any) -> str:
    where = getattr(session.store, "path", None) or "memory"
    return f"profile {session.profile!r}, store {os.fspath(where)!r}"


def _same_store(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return False
    a, b = os.fspath(a), os.fspath(b)
    if "://" in a or "://" in b:
        return a == b
    return Path(a).resolve() == Path(b).resolve()


def _reopen(old: Any) -> Any:
    """A new Session on the store (and with the settings) of the closed session ``old``."""
    from diffract.session import Session

    cfg = old.config
    new = Session(
        cfg["profile"],
        path=cfg["path"],
        backend=cfg["backend"],
        cache=cfg["cache"],
        memory_budget=cfg["memory_budget"],
        workers=cfg["workers"],
        readonly=old.readonly,
        lock_timeout=cfg["lock_timeout"],
        executor=old.executor,
        registry=old.registry,
    )
    new.copy_settings_from(old)
    return new


def _csv_cell(v: Any) -> Any:
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v)
    return safe_cell(v)  # a text cell starting like a formula is written as text


def _csv_text(rows: list[dict[str, Any]], fields: list[str]) -> str:
    """Rows as CSV text: the columns are the union of every row's keys, in first-seen order
    (a row without a column leaves it empty)."""
    import io

    cols: dict[str, None] = {}
    for r in rows:
        cols.update(dict.fromkeys(r))
    if not rows:
        cols = dict.fromkeys(["model_id", "name", "uid", "type", *fields])
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(cols), restval="")
    w.writerow({c: safe_cell(c) for c in cols})
    for r in rows:
        w.writerow({k: _csv_cell(v) for k, v in r.items()})
    return buf.getvalue()


class RunsTable:
    """What ``%diffract runs`` shows: stores and their models (HTML and text).

    Args:
        root: the folder the stores were found under.
        stores: the stores found (each with its ``path`` relative to ``root``); each is read
            for its summary, a store that cannot be read shows its error.
    """

    def __init__(self, root: Path, stores: Sequence[Mapping[str, Any]]) -> None:
        from diffract.store.reader import StoreReader

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
                    f"  {m['model_id']}: {m['slices']} slices · {_fields_summary(m['fields'])}"
                )
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        if not self.stores:
            return (
                f"<p>No diffract stores under <code>{html.escape(os.fspath(self.root))}</code>.</p>"
            )
        # JupyterLab right-aligns table cells: names read left to right, counts on the right
        left = "text-align:left;vertical-align:top"
        right = "text-align:right;vertical-align:top"
        rows = []
        for s in self.stores:
            models = s["models"] or [{"model_id": "(no models)", "slices": 0, "fields": []}]
            for i, m in enumerate(models):
                store = (
                    f"<td style='{left}' rowspan='{len(models)}'><code>{html.escape(s['path'] or '.')}</code></td>"
                    if i == 0
                    else ""
                )
                fields = list(m["fields"])
                cell = html.escape(_fields_summary(fields))
                if len(fields) > RUNS_FIELDS_SHOWN:
                    cell = (
                        f"<details><summary>{cell}</summary>"
                        f"<div style='max-width:60em;white-space:normal'>{html.escape(', '.join(fields))}</div></details>"
                    )
                rows.append(
                    f"<tr>{store}<td style='{left}'>{html.escape(m['model_id'])}</td>"
                    f"<td style='{right}'>{m['slices']}</td><td style='{left}'>{cell}</td></tr>"
                )
        head = "".join(
            f"<th style='{left if h != 'slices' else right}'>{h}</th>"
            for h in ("store", "model", "slices", "fields")
        )
        return f"<table class='diffract-runs-table'><tr>{head}</tr>" + "".join(rows) + "</table>"


#: field names listed in a ``%diffract runs`` row before "(+N more)"
RUNS_FIELDS_SHOWN = 5


def _fields_summary(fields: Sequence[str]) -> str:
    """``"12 fields: alpha, stable_rank, ... (+7 more)"``: a count and the first names."""
    if not fields:
        return "no fields yet"
    names = ", ".join(fields[:RUNS_FIELDS_SHOWN])
    more = f" (+{len(fields) - RUNS_FIELDS_SHOWN} more)" if len(fields) > RUNS_FIELDS_SHOWN else ""
    return f"{len(fields)} field{'s' if len(fields) != 1 else ''}: {names}{more}"


def load_ipython_extension(ipython: Any) -> None:
    """Register the ``%diffract`` magic with IPython.

    Args:
        ipython: the IPython shell.
    """
    ipython.register_magics(DiffractMagics)
