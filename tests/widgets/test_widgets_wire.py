"""The wire contract is the same on both sides: ``_vocab/wire.py`` TypedDicts, the TS
interfaces in ``js/shared/wire.ts``, the widgets' synced traits and the server's answers."""

from __future__ import annotations

import pytest

from _ui_helpers import ts_interfaces
from diffract._vocab.wire import MIRRORED


@pytest.mark.parametrize("name", sorted(MIRRORED))
def test_typed_dicts_mirror_the_ts_interfaces(name):
    assert set(MIRRORED[name].__annotations__) == ts_interfaces()[name]


def test_widget_traits_mirror_the_ts_state():
    import anywidget  # noqa: F401  (a test dependency: missing is a failure)

    from diffract.widgets import FilterBuilder, ProgressWidget

    ts = ts_interfaces()
    for cls, iface in ((FilterBuilder, "FilterBuilderState"), (ProgressWidget, "ProgressState")):
        synced = {n for n, t in cls.class_traits(sync=True).items() if not n.startswith("_")}
        synced -= {"layout", "tabbable", "tooltip", "comm", "keys", "log"}
        assert synced == ts[iface], iface


def test_server_answers_have_the_wire_keys(tmp_path):
    from _ui_helpers import make_store
    from diffract.server import StoreReader, find_stores

    make_store(tmp_path / ".diffract", models=("m1",), fields=("frob_norm",))
    ts = ts_interfaces()
    (store,) = find_stores(tmp_path)
    assert set(store) == ts["StoreEntry"]
    summary = StoreReader.get((tmp_path / ".diffract").resolve()).summary()
    assert set(summary["models"][0]) == ts["ModelEntry"]
    assert set(summary) | set(store) == ts["StoreReply"]  # the handler adds the entry's keys
    field = StoreReader.get((tmp_path / ".diffract").resolve()).field("frob_norm")
    assert set(field["models"][0]["points"][0]) == ts["FieldPoint"]
    assert set(field) | set(store) == ts["FieldReply"]
