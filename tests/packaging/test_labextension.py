"""One version everywhere, the prebuilt extension and the server extension are declared, and
``import diffract`` (and the server extension module) stays light."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import diffract

ROOT = Path(__file__).resolve().parents[2]
PKG = Path(diffract.__file__).parent


def _built_extension() -> Path:
    """The built lab extension's package.json; built here (``npm run build``) when missing."""
    import os
    import shutil

    built = PKG / "labextension" / "package.json"
    if not built.exists():
        assert shutil.which("npm"), "the lab extension is not built and npm is missing: make js"
        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        }
        subprocess.run(["npm", "run", "build"], cwd=ROOT, env=env, check=True, timeout=900)
    assert built.exists(), "npm run build did not write python/diffract/labextension"
    return built


def test_one_version_in_package_json_and_the_built_extension():
    version = json.loads((ROOT / "package.json").read_text())["version"]
    assert diffract.__version__ == version
    built = _built_extension()
    assert json.loads(built.read_text())["version"] == diffract.__version__
    assert json.loads(built.read_text())["name"] == "diffract-lab"


def test_entry_points():
    assert diffract._jupyter_labextension_paths() == [
        {"src": "labextension", "dest": "diffract-lab"}
    ]
    assert diffract._jupyter_server_extension_points() == [{"module": "diffract.server"}]
    config = json.loads((ROOT / "jupyter-config" / "server-config" / "diffract.json").read_text())
    assert config["ServerApp"]["jpserver_extensions"] == {"diffract": True}
    assert json.loads((ROOT / "install.json").read_text())["packageName"] == "diffract-lab"


def test_front_end_handshake_compares_package_json_version():
    # the sidebar's sources (js/lab/*.ts: the handshake may live in any of its modules)
    src = "\n".join(p.read_text() for p in sorted((ROOT / "js" / "lab").glob("*.ts")))
    assert (
        "import pkg from '../../package.json'" in src
        # the sidebar model asks the server's version (js/tests/model.test.ts checks the mismatch)
        and "<VersionReply>('version')" in src
    )


HEAVY = (
    "torch",
    "jax",
    "h5py",
    "plotly",
    "ipywidgets",
    "anywidget",
    "pandas",
    "scipy",
    "tornado",
    "jupyter_server",
)


@pytest.mark.parametrize("module", ["diffract", "diffract.server"])
def test_imports_stay_light(module):
    code = f"import sys, {module}; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_jupyter_sees_both_extensions():
    jupyter = Path(sys.executable).parent / "jupyter"
    assert jupyter.exists(), (
        "jupyter is not installed in this environment: pip install -e '.[test]'"
    )
    _built_extension()
    labext = subprocess.run([str(jupyter), "labextension", "list"], capture_output=True, text=True)
    text = labext.stdout + labext.stderr
    assert "diffract-lab" in text, "diffract-lab is not installed here: pip install -e '.[test]'"
    assert "diffract-lab v" + diffract.__version__ in text and "enabled" in text
    srv = subprocess.run(
        [str(jupyter), "server", "extension", "list"], capture_output=True, text=True
    )
    assert "diffract" in srv.stdout + srv.stderr and "enabled" in srv.stdout + srv.stderr


@pytest.mark.slow
def test_clean_clone_wheel_installs_both_extensions(tmp_path):
    """``pip wheel`` from a fresh clone builds the JS (npm) into the wheel; installing that
    wheel gives an enabled prebuilt lab extension and an enabled server extension."""
    import shutil
    import zipfile

    assert shutil.which("git") and shutil.which("npm"), "this test needs git and npm (make install)"
    assert (ROOT / ".git").exists(), "this test clones the checkout: run it from a git checkout"
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(tmp_path / "dist"),
            str(clone),
        ],
        check=True,
        timeout=900,
    )
    (wheel,) = (tmp_path / "dist").glob("diffract_lab-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    data = f"diffract_lab-{diffract.__version__}.data/data/"
    for must in (
        "diffract/static/filter.js",
        "diffract/static/progress.js",
        "diffract/labextension/package.json",
        data + "share/jupyter/labextensions/diffract-lab/package.json",
        data + "share/jupyter/labextensions/diffract-lab/install.json",
        data + "etc/jupyter/jupyter_server_config.d/diffract.json",
    ):
        assert must in names, must
    assert any(
        n.startswith(data + "share/jupyter/labextensions/diffract-lab/static/remoteEntry.")
        for n in names
    )
    # unpack it as an installer would (never pip install here: pip would uninstall this
    # environment's own diffract-lab), then ask Jupyter what it sees in that prefix
    prefix = tmp_path / "prefix"
    site = prefix / "site-packages"
    with zipfile.ZipFile(wheel) as zf:
        for name in names:
            if name.endswith("/"):
                continue
            target = prefix / name[len(data) :] if name.startswith(data) else site / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(name))
    env = {
        **__import__("os").environ,
        "PYTHONPATH": str(site),
        "JUPYTER_PATH": str(prefix / "share" / "jupyter"),
        "JUPYTER_CONFIG_DIR": str(prefix / "etc" / "jupyter"),
    }
    jupyter = [sys.executable, "-m", "jupyter"]
    lab = subprocess.run(
        [*jupyter, "labextension", "list"], capture_output=True, text=True, env=env
    )
    text = lab.stdout + lab.stderr
    line = next(ln for ln in text.splitlines() if "diffract-lab" in ln)
    assert f"v{diffract.__version__}" in line and "enabled" in line and "OK" in line
    assert str(prefix) in text  # found in the installed prefix, not in this environment
    srv = subprocess.run(
        [*jupyter, "server", "extension", "list"], capture_output=True, text=True, env=env
    )
    assert "diffract" in srv.stdout + srv.stderr and "enabled" in srv.stdout + srv.stderr
