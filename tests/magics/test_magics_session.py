"""``%diffract`` and the notebook's own Session (issue 16, point 7): it is used without
``%diffract open``, ``%diffract use NAME`` picks one, no writer lock is taken over silently,
and the help text and docs/magics.md spell the same options."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from diffract import magics

DOCS = Path(__file__).resolve().parents[2] / "docs" / "magics.md"


@pytest.fixture
def ip(fresh_shell):
    fresh_shell.run_cell("from _ui_helpers import mlp\nfrom diffract import Session")
    return fresh_shell


def _magics(ip):
    return ip.magics_manager.registry["DiffractMagics"]


def test_compute_uses_the_notebooks_session(ip, capsys):
    ip.run_cell("session = Session(profile='ram')\nsession.models.add(mlp(0), 'm1')")
    ip.run_line_magic("diffract", "compute frob_norm --wait")
    out = capsys.readouterr().out
    assert "using the notebook's Session 'session'" in out and "computed" in out
    assert _magics(ip).session is ip.user_ns["session"]
    assert ip.user_ns["session"].results.export_table("frob_norm", export_format="list")


def test_several_sessions_most_recent_and_named(ip, capsys):
    ip.run_cell("a = Session(profile='ram')\nb = Session(profile='ram')")
    ip.run_line_magic("diffract", "add mlp(0) --id m1")
    out = capsys.readouterr().out
    assert "using the notebook's Session 'b'" in out and "also found a" in out
    assert ip.user_ns["b"].models.ids() == ["m1"] and ip.user_ns["a"].models.ids() == []
    s = ip.run_line_magic("diffract", "use a")
    assert s is ip.user_ns["a"] and "using 'a'" in capsys.readouterr().out
    ip.run_line_magic("diffract", "add mlp(1) --id m2")
    assert ip.user_ns["a"].models.ids() == ["m2"]


def test_use_errors(ip):
    ip.run_cell("x = 3\ns = Session(profile='ram')")
    with pytest.raises(UsageError, match=r"'nope' is not defined; notebook Sessions: s"):
        ip.run_line_magic("diffract", "use nope")
    with pytest.raises(UsageError, match=r"'x' is a int, not a Session"):
        ip.run_line_magic("diffract", "use x")


def test_rebound_variable_is_followed(ip, capsys):
    ip.run_cell("session = Session(profile='ram')")
    ip.run_line_magic("diffract", "add mlp(0) --id m1")
    ip.run_cell("session = Session(profile='ram')")
    ip.run_line_magic("diffract", "add mlp(0) --id m2")
    assert ip.user_ns["session"].models.ids() == ["m2"]


def test_open_reuses_the_notebooks_writer(ip, in_tmp, capsys):
    ip.run_cell("session = Session()")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no takeover warning
        s = ip.run_line_magic("diffract", "open")
    assert s is ip.user_ns["session"]
    assert "already has this store open for writing; using it" in capsys.readouterr().out
    ip.run_line_magic("diffract", "add mlp(0) --id m1")  # the user's session can still write
    assert ip.user_ns["session"].models.ids() == ["m1"]


def test_takeover_is_said_in_plain_words(ip, in_tmp, capsys):
    from diffract import Session

    hidden = Session()  # not a notebook variable: the magic cannot reuse it
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            s = ip.run_line_magic("diffract", "open")
        err = capsys.readouterr().err
        assert "took its writer lock over" in err and "earlier one can only read" in err
        assert ".py" not in err and "warn(" not in err  # no source path or line
        assert not s.readonly
    finally:
        hidden.close()


def test_open_keeps_a_notebook_session_open(ip, in_tmp):
    ip.run_cell("r = Session(profile='ram')")
    ip.run_line_magic("diffract", "use r")
    ip.run_line_magic("diffract", "open --profile ram")
    ip.user_ns["r"].models.add({"w": __import__("numpy").ones((4, 3))}, "m")  # still usable


def test_no_session_at_all(ip):
    with pytest.raises(UsageError, match=r"no store is open.*%diffract use NAME"):
        ip.run_line_magic("diffract", "compute frob_norm")


# --- one spelling per option: help text vs docs/magics.md -----------------------------------


def _options_by_command(lines: list[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for line in lines:
        m = re.search(r"%diffract (\w+)(.*)", line)
        if m:
            out.setdefault(m.group(1), set()).update(re.findall(r"--[a-z][a-z-]*", m.group(2)))
    return out


def test_help_and_docs_list_the_same_options():
    help_lines = [ln for ln in magics.USAGE.splitlines() if ln.startswith("  %diffract ")]
    doc_lines = [
        re.split(r"(?<!\\)\|", ln)[1]  # the first cell (a `\|` inside it is escaped)
        for ln in DOCS.read_text().splitlines()
        if ln.startswith("| `%diffract ")
    ]
    in_help, in_docs = _options_by_command(help_lines), _options_by_command(doc_lines)
    assert in_help == in_docs
    # and both list what the parser accepts (hidden aliases left out)
    sub = next(a for a in magics._parser()._actions if a.dest == "cmd")
    for cmd, parser in sub.choices.items():
        shown = {o for a in parser._actions if a.help != "==SUPPRESS==" for o in a.option_strings}
        assert shown == in_help.get(cmd, set()), cmd


def test_show_model_is_a_hidden_alias_of_models():
    args = magics._parser().parse_args(["show", "esd", "--kind", "esd", "--model", "m1"])
    assert args.models == ["m1"]
    assert "--model " not in magics.USAGE


def test_a_notebook_session_opened_later_is_followed(ip, in_tmp, capsys):
    ip.run_line_magic("diffract", "open")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a takeover in this process is silent (issue 29)
        ip.run_cell("session = Session()", store_history=False)
    assert ip.user_ns["session"].store.took_over
    ip.run_line_magic("diffract", "add mlp(0) --id m1")  # not refused by the superseded one
    assert "'session' took this store's writer lock over; using it" in capsys.readouterr().out
    assert ip.user_ns["session"].models.ids() == ["m1"]
