"""JupyterLab server for the Galata tests: a fresh root folder, a known token, port 8899."""

import os
import tempfile
from pathlib import Path

from jupyterlab.galata import configure_jupyter_server

c = get_config()  # noqa: F821 - provided by Jupyter's config loader
configure_jupyter_server(c)

root = Path(os.environ.get("DIFFRACT_UI_ROOT") or tempfile.mkdtemp(prefix="diffract-ui-"))
root.mkdir(parents=True, exist_ok=True)
c.ServerApp.root_dir = str(root)
c.ServerApp.port = int(os.environ.get("DIFFRACT_UI_PORT", "8899"))
c.ServerApp.ip = "127.0.0.1"
c.ServerApp.allow_root = True
c.ServerApp.open_browser = False
c.IdentityProvider.token = os.environ.get("DIFFRACT_UI_TOKEN", "diffract-ui-token")
c.ServerApp.jpserver_extensions = {"diffract": True}
c.LabApp.news_url = None
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"
