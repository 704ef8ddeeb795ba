"""``compute.fields()`` and ``diffract.fields()``: the registry's and a session's field lists."""

from __future__ import annotations

import diffract
from diffract import Session
from diffract.kernels import default_registry, make_kernel


def test_fields_lists_of_the_registry_and_of_a_session():
    names = diffract.fields()
    assert names == sorted(names) and len(names) == len(set(names))
    assert {"frob_norm", "stable_rank", "pl_alpha", "esd"} <= set(names)
    assert Session(profile="ram").compute.fields() == names
    reg = default_registry().copy()
    reg.register(make_kernel(lambda weights: 1.0, name="one", outputs="one_field"))
    mine = Session(profile="ram", registry=reg).compute.fields()
    assert set(mine) == set(names) | {"one_field"}
    assert "one_field" not in diffract.fields()  # a copy's kernels stay in the copy
