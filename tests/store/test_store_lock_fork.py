"""Issue 28, point 13: the writer lock and forked children.

A child forked by a writer shares the writer's ``flock`` (it belongs to the open file): it
kept the store locked after the writer was SIGKILLed, and the error named the dead writer's
pid. A forked child now closes the inherited descriptor (without unlocking it: that would
unlock the parent), and the error names the process that actually holds the lock.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

#: argv: backend, store path, how the child is made ("fork", "exec" or "fork-exit")
SCENARIO = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys, time
    from diffract import StoreLockedError
    from diffract.store import Batch, open_backend

    backend, path, how = sys.argv[1:4]
    r, w = os.pipe()
    writer = os.fork()
    if writer == 0:  # the writer: opens the store, makes a child, waits to be killed
        os.close(r)
        st = open_backend(backend, path)
        st.commit(Batch(add_models={"m": {}}, fields={("u0@m", "f"): 1.0}))
        if how == "exec":  # a child that inherits the lock past exec (not by os.fork)
            child = subprocess.Popen(["sleep", "60"], pass_fds=[st._lock._fd]).pid
        else:
            child = os.fork()
            if child == 0:
                if how == "fork-exit":  # exits normally: atexit finalizers run
                    sys.exit(0)
                time.sleep(60)
                os._exit(0)
            if how == "fork-exit":
                os.waitpid(child, 0)
        os.write(w, f"{os.getpid()} {child}\\n".encode())
        time.sleep(60)
        os._exit(0)
    os.close(w)
    writer, child = map(int, os.read(r, 100).split())
    out = {"writer": writer, "child": child}
    if how != "fork-exit":  # kill the writer; its child lives on
        os.kill(writer, signal.SIGKILL)
        os.waitpid(writer, 0)
    try:
        st = open_backend(backend, path)
        out["opened"] = True
        st.commit(Batch(fields={("u1@m", "f"): 2.0}))
        st.close()
    except StoreLockedError as e:
        out["locked"] = str(e)
    for pid in (writer, child):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    print(json.dumps(out))
    """
)


def _scenario(backend: str, path, how: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", SCENARIO, backend, str(path), how],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, r.stderr[-3000:]
    return json.loads(lines[-1])


@pytest.mark.parametrize("backend", ["hdf5", "sqlite"])
def test_a_forked_child_of_a_killed_writer_does_not_keep_the_store_locked(tmp_path, backend):
    out = _scenario(backend, tmp_path / "store", "fork")
    assert out.get("opened"), out  # was: StoreLockedError naming the dead writer


def test_the_lock_error_names_the_process_that_holds_the_lock(tmp_path):
    """A process that inherited the lock past exec (``pass_fds``: no at-fork handler runs)
    holds it after the writer died: the error names that process, and says the writer that
    took the lock has exited."""
    out = _scenario("hdf5", tmp_path / "store", "exec")
    msg = out.get("locked")
    assert msg is not None, out
    assert f"pid {out['child']} (sleep)" in msg, msg
    assert f"the writer that took it, pid {out['writer']}, has exited" in msg, msg


def test_a_forked_child_that_exits_does_not_unlock_its_parent(tmp_path):
    """The child's copy of the lock object used to unlock the shared ``flock`` when it was
    finalized (at the child's exit): the writer, still running, lost its lock and a second
    writer got in."""
    out = _scenario("hdf5", tmp_path / "store", "fork-exit")
    msg = out.get("locked")
    assert msg is not None, out
    assert f"pid {out['writer']} (python" in msg, msg
