"""The docs site builds offline with ``mkdocs build --strict`` (no warnings), and shows the
widget and sidebar screenshots taken by the browser tests."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocstrings_handlers.python")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stderr


def test_builds_without_warnings(site):
    _, log = site
    assert not [ln for ln in log.splitlines() if ln.startswith(("WARNING", "ERROR"))], log


@pytest.mark.parametrize(
    "page",
    [
        "index.html",
        "quickstart/index.html",
        "concepts/sessions/index.html",
        "concepts/identity/index.html",
        "concepts/scopes/index.html",
        "concepts/kernels/index.html",
        "concepts/storage/index.html",
        "fields/index.html",
        "storage/index.html",
        "sampling/index.html",
        "notebooks/index.html",
        "api/session/index.html",
        "api/widgets/index.html",
    ],
)
def test_page_is_built(site, page):
    assert (site[0] / page).is_file()


def test_api_reference_is_generated_from_docstrings(site):
    html = (site[0] / "api" / "session" / "index.html").read_text()
    assert 'id="diffract.session.Compute.apply"' in html
    assert "where they are not stored yet" in html  # Compute.apply's docstring
    widgets = (site[0] / "api" / "widgets" / "index.html").read_text()
    assert 'id="diffract.widgets.FilterBuilder"' in widgets


def test_every_image_a_page_shows_exists():
    for md in DOCS.rglob("*.md"):
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", md.read_text()):
            if "://" in target:
                continue
            assert (md.parent / target).resolve().is_file(), (
                f"{md.relative_to(ROOT)} shows missing {target}"
            )


def test_screenshots_are_shown_on_the_widgets_and_sidebar_pages_and_the_readme():
    assert sorted(p.name for p in (DOCS / "img").glob("*.png")), "docs/img holds no screenshots"
    for page in ("widgets.md", "sidebar.md"):
        if (DOCS / page).exists():
            assert "](img/" in (DOCS / page).read_text(), f"docs/{page} shows no screenshot"
    readme = (ROOT / "README.md").read_text()
    head = readme[: readme.index("## ")]
    assert re.search(r"!\[[^\]]*\]\(docs/img/[\w-]+\.png\)", head), (
        "README: no screenshot near the top"
    )
    for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", readme):
        assert (ROOT / target).is_file(), f"README shows missing {target}"


def test_browser_screenshots_are_copied_into_the_docs():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from mkdocs_hooks import sync_screenshots
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    sync_screenshots(ROOT)
    shots = ROOT / "ui-tests" / "screenshots"
    for png in shots.glob("*.png") if shots.is_dir() else []:
        assert (DOCS / "img" / png.name).read_bytes() == png.read_bytes()
