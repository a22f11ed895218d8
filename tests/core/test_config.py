"""The config schema: validation errors name the field, overrides, canonical hash."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from crl.core import config
from tests.conftest import REPO

QUICKSTART = REPO / "conf" / "quickstart.yaml"


def test_quickstart_loads_and_hash_is_stable() -> None:
    a = config.load(QUICKSTART)
    b = config.load(QUICKSTART)
    assert a.hash() == b.hash() and len(a.hash()) == 12
    assert a.run_id() == f"quickstart-{a.hash()}"
    assert {r for r, _ in config.objectives(a.grid)} == {"one_negative", "scrl", "sscrl"}
    assert {loss for _, loss in config.objectives(a.grid)} == set(config.LOSSES)


def test_configs_without_a_dense_section_keep_their_hash() -> None:
    """The dense section is left out of the hash when absent, so the run folders of grids
    written before it existed keep their names (fbf8e18af886: the quickstart's grid)."""
    tree = yaml.safe_load(QUICKSTART.read_text())
    assert config.load(QUICKSTART).dense is not None
    tree.pop("dense")
    # the quickstart's grid as it was then (before its latent classes, head and ladder changed)
    tree["dataset"]["separation"] = 1.5
    tree["model"] = {"d": 8, "R": 1.0, "steps": 60, "batch": 64, "lr": 0.05}
    tree["grid"].pop("normalise")
    tree["eval"].pop("ladder")
    assert config.validate(tree).hash() == "fbf8e18af886"


def test_grid_axes_join_the_hash_only_when_given() -> None:
    base = config.load(QUICKSTART)
    assert "R" not in base.model_dump(mode="json")["grid"] or base.grid.R is None
    with_axis = config.load(QUICKSTART, ["grid.R=[1.0]"])
    assert with_axis.grid.R == [1.0] and with_axis.hash() != base.hash()
    assert config.load(QUICKSTART, ["grid.R=null"]).hash() == base.hash()


def test_override_changes_hash_and_parses_yaml() -> None:
    base = config.load(QUICKSTART)
    changed = config.load(QUICKSTART, ["grid.m=[2, 8]", "eval.temperature=0.25"])
    assert changed.grid.m == [2, 8] and changed.eval.temperature == 0.25
    assert changed.hash() != base.hash()


def test_defaults_filled_in_hash() -> None:
    """Writing a default explicitly does not change the hash: it is over the validated config."""
    base = config.load(QUICKSTART)
    explicit = config.load(QUICKSTART, [f"eval.probe_points={base.eval.probe_points}"])
    assert explicit.hash() == base.hash()


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("grid.m=[0, 4]", "grid.m"),
        ("grid.n=[0]", "grid.n"),
        ("grid.m=[]", "grid.m"),
        ("model.R=0", "model.R"),
        ("model.R=-1", "model.R"),
        ("eval.temperature=0", "eval.temperature"),
        ("eval.delta=1.5", "eval.delta"),
        ("eval.delta=0", "eval.delta"),
        ("grid.losses=[bogus]", "grid.losses"),
        ("grid.regimes=[nope]", "grid.regimes"),
        ("dataset.kind=mnist", "dataset"),
        ("model.colour=3", "model.colour"),
        ("grid.regimes=[one_negative]", "grid"),
        ("grid.R=[]", "grid.R"),
        ("grid.R=[1, 0]", "grid.R"),
        ("grid.R=[1, 1]", "grid.R"),
        ("grid.temperature=[0.5, -1]", "grid.temperature"),
        ("grid.normalise=[sphere]", "grid.normalise"),
        ("eval.m_star.bootstrap=0", "eval.m_star.bootstrap"),
    ],
)
def test_bad_values_name_the_field(override: str, field: str) -> None:
    with pytest.raises(config.ConfigError) as err:
        config.load(
            QUICKSTART, [override] + (["grid.losses=[lse]"] if "one_negative]" in override else [])
        )
    message = str(err.value)
    assert field in message and "\n" not in message


def test_missing_required_key(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("name: x\ndataset: {kind: synthetic}\n")
    with pytest.raises(config.ConfigError, match="grid: required key is missing"):
        config.load(path)


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match="does not exist"):
        config.load(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(config.ConfigError, match="not valid YAML"):
        config.load(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(config.ConfigError, match="mapping"):
        config.load(scalar)


def test_bad_override_syntax() -> None:
    with pytest.raises(config.ConfigError, match="key=value"):
        config.load(QUICKSTART, ["grid.m"])


def test_check_constants_mirror_the_checks() -> None:
    """core cannot import the checks, so the schema's constants are tied to them here."""
    import dataclasses

    from crl import checks

    names = {f.name for f in dataclasses.fields(checks.Constants)}
    assert set(config.ConstantsConfig.model_fields) == names


def test_check_overrides() -> None:
    assert config.check_overrides(["a=1"], None) == ["a=1"]
    assert config.check_overrides(["a=1"], 3) == ["a=1", "instances=3"]
    with pytest.raises(config.ConfigError, match="--instances 0"):
        config.check_overrides([], 0)


def test_dataset_kind_is_not_in_the_field_path() -> None:
    tree = {
        "name": "x",
        "dataset": {"kind": "synthetic", "classes": 1},
        "grid": {"regimes": ["scrl"], "losses": ["lse"], "m": [1], "n": [1]},
    }
    with pytest.raises(config.ConfigError, match=r"^config field dataset\.classes:"):
        config.validate(tree)


LI2026 = REPO / "conf" / "li2026.yaml"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["model.solver=adam"], "model.solver"),
        (["grid.losses=[lse, hinge]"], "grid.losses"),
        (["grid.regimes=[one_negative, scrl]"], "grid.regimes"),
        (["dataset.correlations=[0.5, 1.0]"], "dataset.correlations"),
        (["dataset.correlations=[]"], "dataset.correlations"),
        (["eval.m_star.metrics=[bogus]"], "eval.m_star.metrics"),
        (["eval.m_star.delta=0"], "eval.m_star.delta"),
        (["grid.m_max_over_n=0"], "grid.m_max_over_n"),
        (["grid.normalise=[unit]"], "grid.normalise"),
        (["model.R_times_bayes=2", "grid.R=[1, 2]"], "grid.R"),
    ],
)
def test_paired_config_errors_name_the_field(overrides: list[str], field: str) -> None:
    with pytest.raises(config.ConfigError) as err:
        config.load(LI2026, overrides)
    message = str(err.value)
    assert field in message and "\n" not in message and "<root>" not in message


def test_r_times_bayes_is_for_the_gaussian_only() -> None:
    with pytest.raises(config.ConfigError, match="model.R_times_bayes"):
        config.load(QUICKSTART, ["model.R_times_bayes=2"])


def test_m_star_metrics_default_by_dataset() -> None:
    assert config.load(LI2026).m_star_metrics() == ["excess_auc"]
    assert config.load(QUICKSTART).m_star_metrics() == ["auc_error"]
    chosen = config.load(QUICKSTART, ["eval.m_star.metrics=[probe_error, auc_error]"])
    assert chosen.m_star_metrics() == ["probe_error", "auc_error"]


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("eval.m_star.metrics=[excess_auc]", "not measured by synthetic cells"),
        ("eval.m_star.metrics=[]", "eval.m_star.metrics"),
        ("eval.m_star.deltas=[]", "eval.m_star.deltas"),
        ("dense.views.scale=[0.5, 1.5]", "at most 1"),
    ],
)
def test_lenient_settings_of_the_probe_are_refused(override: str, words: str) -> None:
    """The probe accepted these: an m* metric the cells never have, empty m* lists, a crop
    larger than its image."""
    with pytest.raises(config.ConfigError, match=re.escape(words)):
        config.load(REPO / "conf" / "quickstart.yaml", [override])
    config.load(REPO / "conf" / "quickstart.yaml", ["eval.m_star.metrics=[probe_error]"])


def test_oracle_anchors_need_a_known_law() -> None:
    assert config.load(QUICKSTART, ["eval.oracle_anchors=1000"]).eval.oracle_anchors == 1000
    with pytest.raises(config.ConfigError, match="eval.oracle_anchors: .*synthetic"):
        config.load(LI2026, ["eval.oracle_anchors=1000"])
    with pytest.raises(config.ConfigError, match="eval.oracle_anchors"):
        config.load(QUICKSTART, ["eval.oracle_anchors=1"])


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "conf").glob("*.yaml")))
def test_a_run_folders_config_json_reads_back_as_the_same_config(name: str) -> None:
    """config.json holds the validated config with every default written out; reading it back
    (crl runs, crl query) must give the same config, pretraining sections included."""
    if name == "checks.yaml":
        loaded = config.load_checks(REPO / "conf" / name)
        again = config.CheckConfig.model_validate(loaded.model_dump(mode="json"))
    else:
        loaded = config.load(REPO / "conf" / name)
        again = config.validate(loaded.model_dump(mode="json"))
    assert again == loaded and again.hash() == loaded.hash()


def test_a_pretraining_field_of_the_other_source_is_refused_only_when_it_means_something() -> None:
    quick = config.load(REPO / "conf" / "quickstart.yaml")
    assert quick.dense is not None and quick.dense.pretrain is not None  # shapes: images
    with pytest.raises(config.ConfigError, match="pretrain.fraction: shapes are generated"):
        config.load(REPO / "conf" / "quickstart.yaml", ["dense.pretrain.fraction=0.5"])
    same = config.load(REPO / "conf" / "quickstart.yaml", ["dense.pretrain.fraction=0.3"])
    assert same.hash() == quick.hash()  # the default written out means the default
