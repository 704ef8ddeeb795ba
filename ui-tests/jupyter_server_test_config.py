"""JupyterLab server for the Galata tests: a fresh root folder, a known token, and the port that
playwright.config.js found free (DIFFRACT_UI_PORT); run by hand without it, a free port too."""

import importlib.util
import os
import socket
import tempfile
from pathlib import Path

from jupyterlab.galata import configure_jupyter_server

c = get_config()  # noqa: F821 - provided by Jupyter's config loader
configure_jupyter_server(c)

root = Path(os.environ.get("DIFFRACT_UI_ROOT") or tempfile.mkdtemp(prefix="diffract-ui-"))
root.mkdir(parents=True, exist_ok=True)
c.ServerApp.root_dir = str(root)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


c.ServerApp.port = int(os.environ.get("DIFFRACT_UI_PORT") or _free_port())
# the tests wait on exactly this port: fail loudly rather than move to the next one
c.ServerApp.port_retries = 0
c.ServerApp.ip = "127.0.0.1"
c.ServerApp.allow_root = True
c.ServerApp.open_browser = False
c.IdentityProvider.token = os.environ.get("DIFFRACT_UI_TOKEN", "diffract-ui-token")
# Notebook 7 (frontends.spec.ts opens /notebooks/...) when installed, as `make lab` installs it
c.ServerApp.jpserver_extensions = {
    "diffract": True,
    **({"notebook": True} if importlib.util.find_spec("notebook") else {}),
}
c.LabApp.news_url = None
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"
