"""The docs site builds offline with ``mkdocs build --strict`` (no warnings), and shows the
widget and sidebar screenshots taken by the browser tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _images():
    return {p.name: p.read_bytes() for p in (DOCS / "img").glob("*.png")}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = {k: v for k, v in os.environ.items() if k != "DIFFRACT_DOCS_SCREENSHOTS"}
    before = _images()
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stderr, before, _images()


def test_builds_without_warnings(site):
    log = site[1]
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


def _sync_screenshots():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from mkdocs_hooks import sync_screenshots
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return sync_screenshots


def test_screenshot_sync_copies_new_and_changed_images_only(tmp_path):
    sync = _sync_screenshots()
    shots, img = tmp_path / "ui-tests" / "screenshots", tmp_path / "docs" / "img"
    shots.mkdir(parents=True)
    img.mkdir(parents=True)
    (shots / "new.png").write_bytes(b"new")
    (shots / "changed.png").write_bytes(b"v2")
    (shots / "same.png").write_bytes(b"same")
    (img / "changed.png").write_bytes(b"v1")
    (img / "same.png").write_bytes(b"same")
    (img / "only-in-docs.png").write_bytes(b"kept")
    assert sync(tmp_path) == ["changed.png", "new.png"]
    assert {p.name: p.read_bytes() for p in img.iterdir()} == {
        "new.png": b"new",
        "changed.png": b"v2",
        "same.png": b"same",
        "only-in-docs.png": b"kept",
    }
    assert sync(tmp_path) == []


def test_docs_build_leaves_the_tracked_images_alone(site):
    """Without DIFFRACT_DOCS_SCREENSHOTS=1 (test runs) the build copies no browser-test
    screenshot over docs/img, so a test run changes no tracked file."""
    _, _, before, after = site
    assert before, "docs/img holds no screenshots"
    assert after == before
