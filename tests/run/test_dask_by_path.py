"""Dask runs of a model added by path: the workers read their slices from the checkpoint
themselves, so what is submitted per chunk stays small whatever the weights' size; the
values equal the local run's, and the single store writer stays on the client."""

from __future__ import annotations

import os

import numpy as np
import pytest

from diffract import Session

pytestmark = pytest.mark.slow

FIELDS = ("frob_norm", "stable_rank", "weights_std", "pl_alpha")
LIMIT = 100_000  # bytes submitted per chunk


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(5)
    tensors = {
        f"layers.{i}.weight": rng.standard_t(4, size=(384, 256)).astype(np.float32)
        for i in range(4)
    }
    path = tmp_path_factory.mktemp("ckpt") / "m.safetensors"
    save_file(tensors, str(path))
    return str(path), tensors


def _table(session):
    rows = session.results.export_table(*FIELDS, export_format="list")
    return {r["name"]: {f: r[f] for f in FIELDS} for r in rows}


def _worker_pid(weights):
    return float(os.getpid())


def _registry():
    from diffract.kernels import default_registry, make_kernel

    reg = default_registry().copy()
    reg.register(make_kernel(_worker_pid, outputs="worker_pid"))
    return reg


def _opened_here():
    """The checkpoint files this worker process read by path."""
    from diffract.run import weights

    refs = weights._WORKER_REFERENCES
    return sorted({key[0] for key in refs._leaves}) if refs is not None else []


class _Sizes:
    """Wraps ``client.submit`` and records the pickled size of each task's arguments."""

    def __init__(self, client):
        import cloudpickle

        self.sizes: list[int] = []
        real = client.submit

        def submit(fn, *args, **kwargs):
            self.sizes.append(len(cloudpickle.dumps((fn, args))))
            return real(fn, *args, **kwargs)

        client.submit = submit


@pytest.fixture(scope="module")
def cluster():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as c,
        Client(c) as client,
    ):
        yield client


def test_workers_read_the_checkpoint_by_path(checkpoint, cluster, tmp_path):
    path, tensors = checkpoint
    local = Session(path=tmp_path / "local")
    local.models.add(path, model_id="m")
    local.compute.apply(*FIELDS, progress=False)

    sizes = _Sizes(cluster)
    with Session(
        path=tmp_path / "dask", executor=cluster, memory_budget="1MB", registry=_registry()
    ) as s:
        s.models.add(path, model_id="m")
        assert s.models.info("m")["weights"] == "referenced"
        report = s.compute.apply(*FIELDS, "worker_pid", progress=False)
        assert report.chunks >= 2 and not report.failures
        assert _table(s) == _table(local)
        pids = {
            int(r["worker_pid"]) for r in s.results.export_table("worker_pid", export_format="list")
        }
    weights_per_chunk = sum(t.nbytes for t in tensors.values()) / report.chunks
    assert len(sizes.sizes) == report.chunks
    assert max(sizes.sizes) < LIMIT < weights_per_chunk, sizes.sizes
    # the chunks ran in the workers, and those workers opened the file themselves
    workers = cluster.run(os.getpid)
    opened = cluster.run(_opened_here)
    assert pids <= set(workers.values()) and os.getpid() not in pids
    by_pid = {workers[addr]: files for addr, files in opened.items()}
    assert all(by_pid[pid] == [path] for pid in pids), by_pid


def test_a_model_added_from_memory_still_ships_its_weights(checkpoint, cluster, tmp_path):
    _, tensors = checkpoint
    sizes = _Sizes(cluster)
    with Session(path=tmp_path / "mem", executor=cluster, memory_budget="1MB") as s:
        s.models.add(tensors, model_id="m")
        report = s.compute.apply("frob_norm", progress=False)
        assert not report.failures
    assert min(sizes.sizes) > LIMIT  # the arrays travel with the tasks


def test_workers_that_do_not_see_the_file_get_the_weights(checkpoint, cluster, tmp_path):
    path, _ = checkpoint
    from diffract.run import executors

    sizes = _Sizes(cluster)
    with Session(path=tmp_path / "unseen", executor=cluster, memory_budget="1MB") as s:
        s.models.add(path, model_id="m")
        real = executors.readable_here
        executors.readable_here = lambda files: []  # as on workers without the shared path
        try:
            report = s.compute.apply("frob_norm", progress=False)
        finally:
            executors.readable_here = real
        assert not report.failures
    assert min(sizes.sizes) > LIMIT
