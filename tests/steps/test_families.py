"""The registry of families (crl.steps.families): the built-in families in order, which are
active for a config, their keys in the run's order, and plugins from CRL_FAMILIES."""

from __future__ import annotations

import pytest

from crl.core.config import Config
from crl.core.errors import ConfigError
from crl.steps import families
from crl.steps.cells import all_items
from crl.steps.dense.cell import dense_keys
from crl.steps.family import Family
from crl.steps.keys import grid_keys
from tests.steps.dense.test_pretrain import SHAPES
from tests.steps.helpers import config


def test_the_built_in_families_keep_the_contract_in_order() -> None:
    assert [f.name for f in families.BUILT_IN] == ["unimodal", "paired", "dense"]
    assert all(isinstance(f, Family) for f in families.BUILT_IN)


def test_a_run_with_a_grid_and_a_dense_section_has_both_families_in_order() -> None:
    cfg = config()
    both = Config.model_validate({**cfg.model_dump(mode="json"), "dense": SHAPES})
    assert [f.name for f in families.active(both)] == ["unimodal", "dense"]
    items = all_items(both)
    assert [i.key for i in items] == [*grid_keys(both), *dense_keys(both)]
    assert {i.family for i in items} == {"unimodal", "dense"}


def test_paired_data_is_the_paired_family() -> None:
    cfg = config(
        dataset={"kind": "paired_gaussian", "correlations": [0.9, 0.5]},
        grid={"losses": ["lse"], "regimes": ["scrl"]},
        model={"solver": "apg"},
    )
    assert [f.name for f in families.active(cfg)] == ["paired"]


def test_plugins_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(families.PLUGINS_VARIABLE, "tests.families.toy:FAMILY")
    assert [f.name for f in families.registered()] == ["unimodal", "paired", "dense", "toy"]
    cfg = Config.model_validate({"name": "t", "families": {"toy": {"n": [3]}}})
    assert [f.name for f in families.active(cfg)] == ["toy"]
    monkeypatch.setenv(families.PLUGINS_VARIABLE, "tests.families.toy:FAMILY,tests.families.toy")
    with pytest.raises(ConfigError, match="more than one family is named"):
        families.registered()
    monkeypatch.setenv(families.PLUGINS_VARIABLE, "crl.steps.keys:grid_keys")
    with pytest.raises(ConfigError, match="is not a family"):
        families.registered()


def test_an_unregistered_section_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(families.PLUGINS_VARIABLE, raising=False)
    cfg = Config.model_validate({"name": "t", "families": {"toy": {"n": [3]}}})
    with pytest.raises(ConfigError, match="config field families.toy: no such family"):
        families.active(cfg)
