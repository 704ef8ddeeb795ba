"""Scale: streamed extraction equals in-memory, memory budget chunks, process pools and a
Dask LocalCluster of 2 worker processes give the same fields as the local run."""

from __future__ import annotations

import os

import numpy as np
import pytest

from diffract import Session

FIELDS = ("frob_norm", "stable_rank", "esd", "weights_std", "pl_alpha")


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(3)
    out = {}
    for i in range(6):
        out[f"blocks.{i}.attn.weight"] = rng.standard_t(4, size=(96, 64)).astype(np.float32)
        out[f"blocks.{i}.mlp.weight"] = rng.standard_t(4, size=(128, 64)).astype(np.float32)
        out[f"blocks.{i}.norm.weight"] = rng.normal(size=64).astype(np.float32)
    return out


def table(session):
    rows = session.results.export_table(*FIELDS, export_format="list")
    return {(r["name"]): {f: r[f] for f in FIELDS} for r in rows}


def assert_same(a, b):
    assert a.keys() == b.keys()
    for name in a:
        for f in FIELDS:
            x, y = a[name][f], b[name][f]
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, y)
            else:
                assert x == y, (name, f, x, y)


@pytest.fixture(scope="module")
def local_table(weights):
    s = Session(profile="ram")
    s.models.add(weights, model_id="m")
    s.compute.apply(*FIELDS, progress=False)
    return table(s)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_streamed_safetensors_equals_in_memory(weights, tmp_path, dtype):
    import torch
    from safetensors.torch import save_file

    tensors = {k: torch.from_numpy(v).to(getattr(torch, dtype)) for k, v in weights.items()}
    path = tmp_path / "m.safetensors"
    save_file(tensors, str(path))
    in_memory = Session(profile="ram")
    in_memory.models.add({k: t.float().numpy() for k, t in tensors.items()}, model_id="m")
    in_memory.compute.apply(*FIELDS, progress=False)
    streamed = Session(path=tmp_path / "st", memory_budget="64KB")
    slices = streamed.models.add(str(path), model_id="m")
    assert streamed.models.info("m")["weights"] == "referenced"
    assert {s.dtype for s in slices} == {dtype}
    report = streamed.compute.apply(*FIELDS, progress=False)
    assert report.chunks >= 12  # a chunk per slice or so under a 64 KB budget
    assert_same(table(in_memory), table(streamed))


def test_a_slice_larger_than_the_budget_is_still_processed(weights):
    s = Session(profile="ram", memory_budget=1)
    s.models.add(weights, model_id="m")
    report = s.compute.apply("frob_norm", progress=False)
    assert not report.failures and report.chunks == 12


def worker_pid(weights):
    """The id of the process this kernel runs in (to prove where chunks ran)."""
    return float(os.getpid())


def _pid_registry():
    from diffract.kernels import default_registry, make_kernel

    reg = default_registry().copy()
    reg.register(make_kernel(worker_pid, outputs="worker_pid"))
    return reg


def _pids(session) -> set[int]:
    rows = session.results.export_table("worker_pid", export_format="list")
    assert rows and all(r["worker_pid"] is not None for r in rows)
    return {int(r["worker_pid"]) for r in rows}


def test_process_pool_gives_the_same_fields(weights, local_table):
    s = Session(profile="ram", workers=2, memory_budget="200KB", registry=_pid_registry())
    s.models.add(weights, model_id="m")
    report = s.compute.apply(*FIELDS, "worker_pid", progress=False, executor="processes")
    assert report.chunks > 2 and not report.failures
    assert_same(local_table, table(s))
    assert s.kernel_calls  # calls counted in the workers come back
    # every chunk ran in a worker process of the pool (at most 2), none in this one
    pids = _pids(s)
    assert os.getpid() not in pids and 1 <= len(pids) <= 2, pids


@pytest.mark.slow
def test_dask_local_cluster_gives_the_same_fields(weights, local_table, tmp_path):
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        assert len(client.scheduler_info()["workers"]) == 2
        with Session(
            path=tmp_path / "st", executor=client, memory_budget="200KB", registry=_pid_registry()
        ) as s:
            s.models.add(weights, model_id="m")
            events = []
            report = s.compute.apply(*FIELDS, progress=events.append)
            assert report.chunks > 2 and not report.failures
            assert [e.chunks_done for e in events if e.stage == "chunk"] == list(
                range(1, report.chunks + 1)
            )
            assert_same(local_table, table(s))
            # the chunks ran in the cluster's worker processes, not here
            s.compute.apply("worker_pid", progress=False)
            workers = set(client.run(os.getpid).values())
            assert len(workers) == 2 and os.getpid() not in workers
            pids = _pids(s)
            assert pids <= workers, (pids, workers)
        # the same through a scheduler address
        with Session(path=tmp_path / "st2", executor=cluster.scheduler_address) as s:
            s.models.add(weights, model_id="m")
            s.compute.apply(*FIELDS, progress=False)
            assert_same(local_table, table(s))


def test_unknown_executor_is_a_clear_error(weights):
    from diffract import ConfigError

    s = Session(profile="ram")
    s.models.add(weights, model_id="m")
    with pytest.raises(ConfigError, match="unknown executor 'gpu'"):
        s.compute.apply("frob_norm", executor="gpu")
