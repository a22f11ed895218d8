"""Paths are resolved once, where the user typed them; a run's hash does not depend on where its
inputs lie (crl.core.places)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from crl.core import config as crl_config
from crl.core import places

GRID = {
    "name": "placed",
    "dataset": {"kind": "parquet", "path": "data/x.parquet"},
    "grid": {"regimes": ["scrl"], "losses": ["lse"], "m": [1], "n": [10]},
}


def test_a_relative_path_is_made_absolute_and_a_uri_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    here = Path.cwd()
    assert places.resolved("runs") == str(here / "runs")
    assert places.resolved("./a/../runs/") == str(here / "runs")
    assert places.resolved("/abs/runs") == "/abs/runs"
    assert places.resolved("~/runs") == str(Path.home() / "runs")
    assert places.resolved("runs", "sub") == str(here / "sub" / "runs")
    assert places.resolved("runs", "/elsewhere") == "/elsewhere/runs"
    for uri in ("s3://bucket/runs", "file:///data/runs", "gs://b/p"):
        assert places.resolved(uri) == uri and places.is_uri(uri)
    assert not places.is_uri("runs/s3:/x") and not places.is_uri(Path("s3://x"))


def test_config_paths_are_read_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.parquet").write_bytes(b"rows")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "c.yaml").write_text(yaml.safe_dump(GRID))
    monkeypatch.chdir(tmp_path)
    loaded = crl_config.load("conf/c.yaml")
    assert loaded.dataset.path == str(tmp_path / "data" / "x.parquet")
    overridden = crl_config.load("conf/c.yaml", ["dataset.path=data/../data/x.parquet"])
    assert overridden.dataset.path == loaded.dataset.path
    monkeypatch.chdir(tmp_path / "conf")  # the same file typed from elsewhere: refused, named
    with pytest.raises(crl_config.ConfigError, match="dataset.path"):
        crl_config.load("c.yaml")
    assert crl_config.load("c.yaml", base="..").dataset.path == loaded.dataset.path


def test_the_hash_follows_the_content_of_an_input_not_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.parquet").write_bytes(b"rows")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(GRID))
    monkeypatch.chdir(tmp_path)
    here = crl_config.load("c.yaml")
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(tmp_path / "data" / "x.parquet", moved / "x.parquet")
    elsewhere = crl_config.load(str(tmp_path / "c.yaml"), [f"dataset.path={moved / 'x.parquet'}"])
    assert elsewhere.dataset.path != here.dataset.path
    assert elsewhere.run_id() == here.run_id()  # same bytes: the same run, resumable
    (moved / "x.parquet").write_bytes(b"other rows")
    changed = crl_config.load("c.yaml", [f"dataset.path={moved / 'x.parquet'}"])
    assert changed.run_id() != here.run_id()
    # without fingerprints (a bare validation) the place is all the hash knows of the input
    bare = crl_config.validate(places.resolved_fields(GRID))
    assert (
        bare.hash()
        != crl_config.validate({**GRID, "dataset": {"kind": "parquet", "path": "/o"}}).hash()
    )
