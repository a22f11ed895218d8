"""The pretrain stage with the local executor (no Ray): reuse and repair of its files, and the
grid's encoder pretrained end to end."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import torch

from crl.core.config import Config, load
from crl.orchestration import stages
from crl.orchestration.executor import LocalExecutor
from crl.steps.dense.family import dense_pretrain_job
from crl.steps.run_paths import RunPaths
from tests.conftest import crl
from tests.orchestration.test_bound_grid import write_config
from tests.steps.dense.test_pretrain import PRETRAIN, SHAPES


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Config, RunPaths]:
    config = Config.model_validate(
        {
            "name": "stage",
            "dense": {**SHAPES, "pretrain": {**PRETRAIN, "epochs": 2, "checkpoints": [0, 2]}},
        }
    )
    paths = RunPaths(tmp_path / config.run_id())
    stages.materialize(config, paths, LocalExecutor())
    return config, paths


def test_a_finished_pretraining_is_reused_and_a_lost_checkpoint_retrained(
    setup: tuple[Config, RunPaths], capsys: pytest.CaptureFixture[str]
) -> None:
    config, paths = setup
    assert stages.pretrain(config, paths, LocalExecutor(), progress=False) == 2
    assert stages.pretrain(config, paths, LocalExecutor(), progress=False) == 0
    job = dense_pretrain_job(config, paths)
    kept = torch.load(job.checkpoint(2), weights_only=True)
    job.checkpoint(2).unlink()
    assert stages.pretrain(config, paths, LocalExecutor(), progress=False) == 2
    assert "pretraining again from the start" in capsys.readouterr().err
    again = torch.load(job.checkpoint(2), weights_only=True)
    assert all(torch.equal(kept[k], again[k]) for k in kept)


DIGITS = {
    "name": "digits-pretrain",
    "seed": 0,
    "dataset": {"kind": "digits", "positives": "augmented", "shards": 2},
    "encoder": {
        "kind": "small_cnn",
        "out_dim": 8,
        "pretrain": {
            "objective": "nt_xent",
            "epochs": 2,
            "fraction": 0.1,
            "batch": 32,
            "projection": 8,
        },
    },
    "model": {"d": 4, "steps": 20},
    "grid": {
        "regimes": ["scrl", "sscrl"],
        "losses": ["hinge", "info_nce"],
        "m": [2],
        "n": [32],
        "seeds": [0, 1],
    },
    "eval": {"test_anchors": 64, "negative_pool": 64, "probe_points": 200, "rademacher_draws": 8},
}


@pytest.mark.slow
def test_a_pretrained_small_cnn_is_an_encoder_epoch_of_the_grid(tmp_path: Path) -> None:
    """`crl run` with encoder.pretrain (local executor: Ray Train's path is the dense grid's
    test): cells at epochs 0 and 2, every certified flag held, the probe on the encoder's own
    features, the unimodal rows of the pretrain table and their report section; a rerun's
    stages reuse everything."""
    path = write_config(tmp_path, DIGITS)
    args = ("run", str(path), "--out", str(tmp_path / "runs"), "--quiet", "--executor", "local")
    first = crl(*args)
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / "runs" / load(path).run_id()
    cells = pl.read_parquet(run / "tables" / "cells.parquet")
    assert cells.height == 2 * 2 * 2 * 2
    assert sorted(cells["encoder_epoch"].unique()) == [0, 2]
    assert cells.filter(pl.col("certified"))["gamma_m_holds"].all()
    probes = cells.group_by("encoder_epoch").agg(pl.col("encoder_probe_accuracy").n_unique())
    assert probes["encoder_probe_accuracy"].to_list() == [1, 1]  # one probe per encoder
    assert cells["encoder_probe_accuracy"].is_between(0.1, 1.0).all()
    accuracy, half_width = cells["encoder_probe_accuracy"], cells["encoder_probe_accuracy_ci"]
    binomial = 1.96 * (accuracy * (1 - accuracy) / 200).sqrt()  # probe_points test rows
    assert (half_width - binomial).abs().max() < 1e-12
    assert (run / "features" / "epoch=0").is_dir() and (run / "features" / "epoch=2").is_dir()
    summary = pl.read_parquet(run / "tables" / "summary.parquet")
    assert summary.height == 2 * 2 * 2  # encoder_epoch is a key of the summary
    assert "encoder_probe_accuracy_seed_ci" not in summary.columns  # one value per encoder
    assert summary["encoder_probe_accuracy_ci"].is_not_null().all()
    table = pl.read_parquet(run / "tables" / "pretrain.parquet")
    assert table.select("encoder", "epoch").rows() == [("unimodal", 1), ("unimodal", 2)]
    page = (run / "report" / "index.html").read_text()
    assert "Pretrained encoders (unimodal cells)" in page
    assert (run / "report" / "unimodal_by_encoder_epoch.png").stat().st_size > 0
    config, paths = load(path), RunPaths(run)  # a rerun's stages find everything done
    assert stages.materialize(config, paths, LocalExecutor()) == 0
    assert stages.pretrain(config, paths, LocalExecutor(), progress=False) == 0
    assert stages.embed(config, paths, LocalExecutor(), progress=False) == 0
    outcome = stages.run_cells(config, paths, LocalExecutor(), progress=False)
    assert (outcome.total, outcome.skipped) == (cells.height, cells.height)


def test_a_run_with_both_pretrainings_keeps_them_apart(tmp_path: Path) -> None:
    config = Config.model_validate(
        {
            **DIGITS,
            "dense": {**SHAPES, "pretrain": {**PRETRAIN, "epochs": 1, "checkpoints": [0, 1]}},
        }
    )
    paths = RunPaths(tmp_path / config.run_id())
    plans = stages.pretrainings(config, paths)
    assert [p.section for p in plans] == ["encoder.pretrain", "dense.pretrain"]
    jobs = [(p.section, p.job()) for p in plans]
    assert [job.root for _, job in jobs] == [p.root for p in plans]
    assert [job.task.family for _, job in jobs] == ["unimodal", "dense"]
    assert jobs[0][1].root != jobs[1][1].root


GLYPHS_RUN = {
    **DIGITS,
    "name": "glyphs-pretrain",
    "dataset": {"kind": "glyphs", "side": 8, "classes": 4, "train_size": 200, "test_size": 80},
    "encoder": {
        **DIGITS["encoder"],
        "pretrain": {**DIGITS["encoder"]["pretrain"], "fraction": 0.3},
    },
}
SYNTHETIC_RUN = {
    **DIGITS,
    "name": "mlp-pretrain",
    "dataset": {"kind": "synthetic", "classes": 3, "dim": 6, "train_size": 120, "test_size": 60},
    "encoder": {
        "kind": "mlp",
        "out_dim": 8,
        "pretrain": {"objective": "nt_xent", "epochs": 2, "images": 96, "batch": 32},
    },
}


@pytest.mark.slow
@pytest.mark.parametrize(("tree", "views"), [(GLYPHS_RUN, "affine"), (SYNTHETIC_RUN, "mask")])
def test_glyphs_and_vectors_pretrain_end_to_end(tmp_path: Path, tree: dict, views: str) -> None:
    """`crl run` with the small_cnn on glyphs (affine views) and the mlp on synthetic rows
    (SCARF views): cells at epochs 0 and 2, every certified flag held, one probe per encoder,
    and the pretraining rows in their table."""
    path = write_config(tmp_path, tree)
    args = ("run", str(path), "--out", str(tmp_path / "runs"), "--quiet", "--executor", "local")
    first = crl(*args)
    assert first.returncode == 0, first.stderr[-3000:]
    config = load(path)
    assert config.pretrain_augment() == views
    run = tmp_path / "runs" / config.run_id()
    cells = pl.read_parquet(run / "tables" / "cells.parquet")
    assert cells.height == 2 * 2 * 2 * 2
    assert sorted(cells["encoder_epoch"].unique()) == [0, 2]
    assert cells.filter(pl.col("certified"))["gamma_m_holds"].all()
    probes = cells.group_by("encoder_epoch").agg(pl.col("encoder_probe_accuracy").n_unique())
    assert probes["encoder_probe_accuracy"].to_list() == [1, 1]
    assert set(cells["dataset"]) == {tree["dataset"]["kind"]}
    table = pl.read_parquet(run / "tables" / "pretrain.parquet")
    assert table.select("encoder", "epoch").rows() == [("unimodal", 1), ("unimodal", 2)]
    assert table["loss"].is_finite().all()
    rows = pl.read_parquet(run / "pretrain" / "data")
    expected = 96 if tree is SYNTHETIC_RUN else round(0.3 * 200)
    assert rows.height == expected and "label" not in rows.columns
