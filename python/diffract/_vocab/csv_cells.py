"""CSV cells that a spreadsheet cannot run: the OWASP rule against CSV (formula) injection.

A spreadsheet opening a CSV file runs a cell starting with ``=``, ``+``, ``-`` or ``@`` (and
one starting with a tab or carriage return, which some strip first) as a formula:
``=HYPERLINK(...)`` sends data away, ``+cmd|...`` starts a program. Model ids, parameter
names, metadata and ingested values come from checkpoints and users, so every CSV writer of
the package passes its text cells through :func:`safe_cell`, which prefixes such a cell with
a single quote (shown as text, not run). Numbers are left alone (``-1.5`` stays a number).
"""

from __future__ import annotations

from typing import Any

#: first characters a spreadsheet reads as a formula (OWASP), and their full-width forms
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def safe_cell(value: Any) -> Any:
    """``value`` made safe for a CSV cell: a string starting like a formula gets a ``'``.

    Args:
        value: the cell's value.

    Returns:
        The value, with ``'`` before a string that starts with one of
        :data:`FORMULA_STARTS`; any other value unchanged.
    """
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def safe_frame(df: Any) -> Any:
    """A copy of a pandas DataFrame with :func:`safe_cell` applied to its header and text cells.

    Args:
        df: the frame.

    Returns:
        The frame to write with ``to_csv``.
    """
    out = df.copy()
    for c in out.columns:
        if out[c].dtype == object or str(out[c].dtype).startswith("str"):
            out[c] = out[c].map(safe_cell)
    out.columns = [safe_cell(str(c)) for c in out.columns]
    return out
