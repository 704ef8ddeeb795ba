"""MkDocs hooks for the diffract-lab docs (mkdocs.yml ``hooks:``).

* Pages that other parts of the project write (``docs/benchmarks.md`` ...) may not exist yet
  in a given checkout; their nav entries are dropped with an info line instead of failing the
  strict build.
* Screenshots taken by the browser tests (``ui-tests/screenshots/*.png``) are copied into
  ``docs/img/`` when they differ, so the pages show the latest ones, but only when
  ``DIFFRACT_DOCS_SCREENSHOTS=1`` (``make docs`` sets it): a test run's docs build leaves the
  tracked images alone.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger("mkdocs.hooks.diffract")
ROOT = Path(__file__).resolve().parents[1]


def sync_screenshots(root: Path = ROOT) -> list[str]:
    """Copy ``ui-tests/screenshots/*.png`` into ``docs/img/`` when missing or different."""
    src, dst = root / "ui-tests" / "screenshots", root / "docs" / "img"
    copied = []
    if not src.is_dir():
        return copied
    dst.mkdir(exist_ok=True)
    for png in sorted(src.glob("*.png")):
        target = dst / png.name
        if not target.exists() or target.read_bytes() != png.read_bytes():
            shutil.copyfile(png, target)
            copied.append(png.name)
    return copied


def _prune(nav, docs_dir: Path):
    out = []
    for item in nav:
        if isinstance(item, str):
            keep = (docs_dir / item).exists()
            value = item
        else:
            ((title, value),) = item.items()
            if isinstance(value, list):
                value = _prune(value, docs_dir)
                keep = bool(value)
            else:
                keep = "://" in value or (docs_dir / value).exists()
            value = {title: value}
        if keep:
            out.append(value)
        else:
            log.info("docs: %s is not written yet; left out of the nav", item)
    return out


def on_config(config, **kwargs):
    if os.environ.get("DIFFRACT_DOCS_SCREENSHOTS") == "1":
        copied = sync_screenshots()
        if copied:
            log.info("docs: copied screenshots %s", ", ".join(copied))
    if config.get("nav"):
        config["nav"] = _prune(config["nav"], Path(config["docs_dir"]))
    return config
