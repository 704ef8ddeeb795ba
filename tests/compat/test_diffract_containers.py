"""``diffract.containers.create_main_container`` and ``Session(container=...)``, as Diffract's
guide uses them (its Zarr recipe: ``Session(container=create_main_container("x.ini"))``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from diffract import Session
from diffract._errors import ConfigError
from diffract.containers import MainContainer, create_main_container
from diffract.session import MissingConfigWarning

YAML = "storage:\n  backend: ram\n"


def test_an_absent_config_file_warns_and_the_profile_applies(in_tmp, no_diffract_env) -> None:
    container = create_main_container("configs/hybrid_s3.ini")
    assert isinstance(container, MainContainer)
    with pytest.warns(MissingConfigWarning, match=r"configs/hybrid_s3\.ini"):
        session = Session(container=container)
    assert session.profile == "local"  # Session()'s profile here (docs: d-default-profile)
    session.models.add({"w": np.eye(3)}, model_id="m")
    assert session.models.list() == ["m"]
    session.close()
    assert not (in_tmp / "configs").exists()


def test_a_container_opens_what_config_path_opens(in_tmp, no_diffract_env) -> None:
    Path("ram.yaml").write_text(YAML)
    via_container = Session(container=create_main_container("ram.yaml"))
    via_path = Session(config_path="ram.yaml")
    assert via_container.config == via_path.config
    assert via_container.profile == "ram" and via_container.store.path is None
    assert Session(container=create_main_container(profile="ram")).profile == "ram"


def test_other_containers_and_a_second_configuration_are_refused(in_tmp, no_diffract_env) -> None:
    with pytest.raises(ConfigError, match="create_main_container"):
        Session(container=object())
    with pytest.raises(ConfigError, match="not to both"):
        Session(container=create_main_container(profile="ram"), config_path="x.ini")
    with pytest.raises(ConfigError, match="not to both"):
        Session(profile="ram", container=create_main_container("x.ini"))
    with pytest.raises(ConfigError, match="unknown profile 'nope'"):
        Session(container=create_main_container(profile="nope"))
