"""Issue 16, point 9: the docs site's wide tables are readable. The field catalog's
WeightWatcher column map keeps three cells per row (a name like ``<bulk|tail>`` does not split
a cell), and the site uses mkdocs-material with the stylesheet that wraps wide tables in the
content width."""

from __future__ import annotations

import re
from pathlib import Path

import markdown
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _ww_table_html() -> str:
    text = (ROOT / "docs" / "fields.md").read_text()
    section = text.split("## WeightWatcher columns", 1)[1].split("\n## ", 1)[0]
    return markdown.markdown(section, extensions=["tables"])


def test_every_weightwatcher_row_has_three_cells():
    html = _ww_table_html()
    rows = re.findall(r"<tr>(.*?)</tr>", html, flags=re.S)
    text = _ww_section((ROOT / "docs" / "fields.md").read_text())
    assert len(rows) == text.count("\n| ") > 30  # each source row (header too) is one row
    for row in rows[1:]:
        assert len(re.findall(r"<td>", row)) == 3, row
    # the vectors row keeps its pipes inside one code span
    assert "<code>&lt;bulk|tail&gt;_&lt;mean|var&gt;_" in html


def test_fields_in_the_map_link_to_their_kernel_section():
    html = _ww_table_html()
    assert '<a href="#power_law_fit"><code>pl_alpha</code></a>' in html
    text = (ROOT / "docs" / "fields.md").read_text()
    for anchor in set(re.findall(r"\]\(#(\w+)\)", _ww_section(text))):
        assert f"\n### {anchor}\n" in text, f"no section for #{anchor}"


def _ww_section(text: str) -> str:
    return text.split("## WeightWatcher columns", 1)[1].split("\n## ", 1)[0]


def test_site_theme_wraps_wide_tables():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    assert config["theme"]["name"] == "material"
    css = [ROOT / "docs" / p for p in config["extra_css"]]
    assert css and all(p.is_file() for p in css)
    rules = "".join(p.read_text() for p in css)
    assert "table:not([class])" in rules and "overflow-wrap: anywhere" in rules
