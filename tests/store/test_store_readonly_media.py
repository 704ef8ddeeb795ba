"""Issue 28, point 12: stores on read-only media. A reader opens every backend with
``readonly=True`` (SQLite and hybrid stores could not be opened at all: SQLite cannot create
the log's index there); a writer gets a named error, not a raw ``OSError [Errno 30]``.

The media is a tmpfs remounted read-only, in a child process (as a user other than root, in
a user namespace: ``unshare -rm``).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

from diffract.store import BACKENDS

#: the backends that keep a store on disk (the registry's, but ram)
DISK = [b for b in BACKENDS if b != "ram"]

CHILD = textwrap.dedent(
    """
    import json, os, subprocess, sys
    import numpy as np
    from diffract.store import BACKENDS, Batch, open_backend
    DISK = [b for b in BACKENDS if b != "ram"]

    mount = sys.argv[1]
    os.makedirs(mount, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mount], check=True)
    try:
        def path(b, tag):
            return os.path.join(mount, f"{b}-{tag}" + (".sqlite" if b == "sqlite" else ""))

        def fill(b, p):
            st = open_backend(b, p)
            st.commit(Batch(add_models={"m": {}},
                            fields={("u0@m", "s"): 1.5, ("u0@m", "a"): np.arange(6.0)}))
            return st

        for b in DISK:
            fill(b, path(b, "closed")).close()
        # writers killed before closing: their SQLite logs (and indexes) are left behind
        for b in ("sqlite", "hybrid"):
            subprocess.run([sys.executable, "-c", f'''
    import os, numpy as np
    from diffract.store import Batch, open_backend
    st = open_backend({b!r}, {path(b, "killed")!r})
    st.commit(Batch(add_models={{"m": {{}}}},
                    fields={{("u0@m", "s"): 1.5, ("u0@m", "a"): np.arange(6.0)}}))
    os._exit(0)
    '''], check=True)
        subprocess.run([sys.executable, "-c", f'''
    import os, numpy as np
    from diffract.store import Batch, open_backend
    st = open_backend("sqlite", {path("sqlite", "noshm")!r})
    st.commit(Batch(add_models={{"m": {{}}}}, fields={{("u0@m", "s"): 1.5}}))
    os._exit(0)
    '''], check=True)
        os.unlink(path("sqlite", "noshm") + "-shm")
        subprocess.run(["mount", "-o", "remount,ro", mount], check=True)
        out = {}
        for b, tag in [*((b, "closed") for b in DISK),
                       ("sqlite", "killed"), ("hybrid", "killed"), ("sqlite", "noshm")]:
            rec = {}
            try:
                st = open_backend(b, path(b, tag), readonly=True)
                rec["read"] = [st.get(("u0@m", "s")),
                               st.get(("u0@m", "a")).tolist() if tag != "noshm" else None]
                st.close()
            except Exception as e:
                rec["read_error"] = [type(e).__name__, getattr(e, "errno", None), str(e)]
            try:
                open_backend(b, path(b, tag))
                rec["write"] = "opened"
            except Exception as e:
                rec["write_error"] = [type(e).__name__, isinstance(e, OSError),
                                      getattr(e, "errno", None), str(e)]
            out[f"{b}-{tag}"] = rec
        for b in DISK:  # a new store there
            try:
                open_backend(b, path(b, "new"))
                out[f"{b}-new"] = "created"
            except Exception as e:
                out[f"{b}-new"] = [type(e).__name__, getattr(e, "errno", None), str(e)]
        print(json.dumps(out))
    finally:
        subprocess.run(["umount", mount], check=False)
    """
)


def _as_root(args: list[str]) -> list[str]:
    """``args`` run as root: as they are for root, else in a user namespace (``unshare``)."""
    return args if os.geteuid() == 0 else ["unshare", "-rm", *args]


def test_stores_on_read_only_media_open_for_reading_and_refuse_writers_by_name(tmp_path):
    r = subprocess.run(
        _as_root([sys.executable, "-c", CHILD, str(tmp_path / "media")]),
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, r.stderr[-3000:]
    out = json.loads(lines[-1])
    for b in DISK:
        kind, code, msg = out.pop(f"{b}-new")
        assert kind == "StoreError" and code == errno.EROFS, (b, msg)
        assert msg.startswith(f"cannot create a store at {tmp_path / 'media'}/{b}-new"), msg
        assert "on read-only media" in msg, msg
    for name, rec in out.items():
        if name == "sqlite-noshm":
            continue
        assert rec.get("read") == [1.5, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]], (name, rec)
        kind, is_oserror, code, msg = rec["write_error"]
        assert kind == "StoreError" and is_oserror and code == errno.EROFS, (name, rec)
        assert "is on read-only media; open it with readonly=True" in msg, (name, msg)
        assert msg.startswith("store at " + str(tmp_path / "media")), (name, msg)
    # a log with committed data but without its index cannot be read there: said so,
    # never read as the older file alone (``immutable=1`` would silently skip the log)
    kind, code, msg = out["sqlite-noshm"]["read_error"]
    assert kind == "StoreError" and "write-ahead log" in msg and "copy the store" in msg, msg
