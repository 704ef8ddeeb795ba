"""Every ```python block of README.md, docs/*.md and docs/concepts/*.md runs as written.

Each page's blocks run in order, sharing one namespace, in a fresh Python process (an IPython
shell, as in a notebook, so ``%diffract`` lines work too) whose working folder is a fresh
temporary directory.

A block that cannot run by nature is marked in the Markdown, on the line before its fence,
with an HTML comment (it does not render)::

    <!-- docs-example: skip (needs a GPU) -->

and the reason in parentheses is required. A block that needs a file the reader would have
(a checkpoint) gets a hidden setup that runs just before it, in the same namespace::

    <!-- docs-example: setup
    from safetensors.numpy import save_file
    ...
    -->
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "concepts").glob("*.md")),
]

# The number of blocks that run now; raise it when examples are added or made runnable.
MIN_BLOCKS_RUN = 25

_FENCE = re.compile(r"^(\s*)```\s*(?:python3?|py|ipython3?)\s*$")
_MARKER = re.compile(r"^<!--\s*docs-example:\s*(\w+)(.*)$", re.S)
_SKIP = re.compile(r"^\((.*)\)$", re.S)


@dataclass
class Block:
    page: str
    number: int  # 1-based among the page's python blocks
    line: int  # line of the opening fence
    code: str
    skip: str | None = None  # the reason, when marked skip
    setup: str | None = None  # hidden code run just before the block

    @property
    def label(self) -> str:
        return f"{self.page} block {self.number} (line {self.line})"


def _rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _parse(page: Path) -> list[Block]:
    """The page's python blocks with their markers; a malformed marker is an error."""
    lines = page.read_text().splitlines()
    blocks: list[Block] = []
    pending: list[tuple[int, str, str]] = []  # (line, kind, argument)
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _MARKER.match(line)
        assert m or "docs-example" not in line, (
            f"{_rel(page)}:{i + 1}: write markers as <!-- docs-example: skip (why) --> or "
            "<!-- docs-example: setup ... -->, at the start of the line"
        )
        if m:
            start = i
            text = line
            while "-->" not in text:
                i += 1
                assert i < len(lines), f"{_rel(page)}:{start + 1}: unterminated docs-example"
                text += "\n" + lines[i]
            m = _MARKER.match(text)
            body = m.group(2)
            assert body.rstrip().endswith("-->"), (
                f"{_rel(page)}:{i + 1}: text after '-->' in a docs-example comment"
            )
            body = body.rstrip()[: -len("-->")]
            pending.append((start + 1, m.group(1), body))
            i += 1
            assert i < len(lines) and (_FENCE.match(lines[i]) or _MARKER.match(lines[i])), (
                f"{_rel(page)}:{start + 1}: a docs-example comment must be on the line "
                "right before a ```python fence"
            )
            continue
        fence = _FENCE.match(line)
        if fence:
            end = i + 1
            while end < len(lines) and not lines[end].lstrip().startswith("```"):
                end += 1
            assert end < len(lines), f"{_rel(page)}:{i + 1}: unclosed ```python block"
            code = textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"
            block = Block(_rel(page), len(blocks) + 1, i + 1, code)
            for at, kind, arg in pending:
                where = f"{_rel(page)}:{at}"
                if kind == "skip":
                    reason = _SKIP.match(arg.strip())
                    assert reason and reason.group(1).strip(), (
                        f"{where}: a skip needs a reason: <!-- docs-example: skip (why) -->"
                    )
                    block.skip = reason.group(1).strip()
                elif kind == "setup":
                    assert arg.strip(), f"{where}: an empty setup"
                    block.setup = arg.strip("\n") + "\n"
                else:
                    raise AssertionError(f"{where}: unknown docs-example marker {kind!r}")
            pending = []
            blocks.append(block)
            i = end + 1
            continue
        i += 1
    return blocks


def _all_blocks() -> dict[str, list[Block]]:
    return {_rel(p): _parse(p) for p in PAGES}


# Found without parsing the markers, so that a bad marker fails a test instead of collection.
PAGES_WITH_CODE = [
    _rel(p) for p in PAGES if any(_FENCE.match(ln) for ln in p.read_text().splitlines())
]

# Runs in the child process: argv[1] is the jobs file, argv[2] the result file.
_RUNNER = r"""
import json, sys, traceback, types
from IPython.core.interactiveshell import InteractiveShell

jobs = json.load(open(sys.argv[1]))
shell = InteractiveShell.instance(colors="nocolor")


def setup(code):
    # Run a hidden setup apart; hand the page only the data it made (no modules, classes or
    # functions), so that a setup can never hide an import missing from the page.
    scratch = dict(shell.user_ns)
    try:
        exec(compile(code, "<docs-example setup>", "exec"), scratch)
    except Exception as exc:
        traceback.print_exc()
        return exc
    for name, value in scratch.items():
        hidden = isinstance(value, (types.ModuleType, type, types.FunctionType))
        fresh = name not in shell.user_ns or shell.user_ns[name] is not value
        if fresh and not hidden and not name.startswith("_"):
            shell.user_ns[name] = value
    return None


ran = 0
for job in jobs:
    print(f"\n===== {job['label']}", flush=True)
    if job["counts"]:
        result = shell.run_cell(job["code"], store_history=False)
        error = result.error_before_exec or result.error_in_exec
    else:
        error = setup(job["code"])
    if error is not None:
        json.dump({"ran": ran, "failed": job["label"],
                   "error": f"{type(error).__name__}: {error}"}, open(sys.argv[2], "w"))
        sys.exit(1)
    ran += job["counts"]
json.dump({"ran": ran, "failed": None, "error": None}, open(sys.argv[2], "w"))
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIFFRACT_")}
    env.update(
        KERAS_BACKEND="jax",
        JAX_PLATFORMS="cpu",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        MPLBACKEND="Agg",
    )
    return env


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_WITH_CODE)
def test_page_examples_run(page, tmp_path):
    blocks = _parse(ROOT / page)
    jobs = []
    for b in blocks:
        if b.skip:
            continue
        if b.setup:
            jobs.append({"label": f"the setup of {b.label}", "code": b.setup, "counts": 0})
        jobs.append({"label": b.label, "code": b.code, "counts": 1})
    if not jobs:  # nothing runnable here: every block must say why (counted, not skipped)
        assert blocks and all(b.skip.strip() for b in blocks), f"{page}: unmarked blocks"
        return
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    result_file = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(tmp_path / "jobs.json"), str(result_file)],
        cwd=work,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = (done.stdout + done.stderr)[-6000:]
    assert result_file.exists(), f"{page}: the runner died (rc {done.returncode})\n{output}"
    result = json.loads(result_file.read_text())
    assert result["failed"] is None, f"{result['failed']} raised {result['error']}\n{output}"
    assert done.returncode == 0, output
    assert result["ran"] == sum(1 for b in blocks if not b.skip)


def test_skipped_blocks_carry_a_reason_and_enough_blocks_run():
    blocks = [b for page in _all_blocks().values() for b in page]  # checks every marker
    skipped = [b for b in blocks if b.skip]
    assert not [b.label for b in skipped if not b.skip.strip()], "a skip without a reason"
    run = len(blocks) - len(skipped)
    # each page's test checks that exactly its blocks not marked skip ran
    assert run >= MIN_BLOCKS_RUN, (
        f"only {run} documented examples run (at least {MIN_BLOCKS_RUN} did); skipped: "
        + "; ".join(f"{b.label}: {b.skip}" for b in skipped)
    )
