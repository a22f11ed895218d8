"""Pretraining end to end: the real flow with Ray Train (two DDP workers over gloo), its
checkpoints embedded as the cells' encoder_epoch axis, reuse on a rerun, and a kill -9 in the
middle of pretraining that a rerun continues to the same weights."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import polars as pl
import pytest
import torch

from crl.core import config
from crl.steps.dense.cell import dense_keys
from tests.conftest import crl, crl_killable
from tests.orchestration.test_bound_grid import run_twice, write_config

pytestmark = pytest.mark.slow

EPOCHS = 6
TINY = {
    "name": "tiny-pretrain",
    "seed": 1,
    "dense": {
        "images": {
            "kind": "shapes",
            "size": 16,
            "classes": 3,
            "train_size": 24,
            "test_size": 16,
            "pool_size": 48,
        },
        "views": {"size": 12},
        "backbone": {"channels": 6, "layers": 2, "downsample": 1, "grid": 2},
        "head": {"d": 3, "tol": 1e-5, "max_iter": 100},
        "grid": {"regimes": ["scrl"], "negatives": ["ext"], "m": [3], "n": [8]},
        "eval": {"temperature": 1.0, "test_images": 16, "mi_images": 16},
        "pretrain": {
            "epochs": EPOCHS,
            "checkpoints": [0, 2, EPOCHS],
            "images": 192,
            "batch": 16,
            "queue": 32,
            "projection": 8,
            "workers": 2,
        },
    },
}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_twice(tmp_path_factory.mktemp("pretrain"), TINY)


def test_every_checkpoint_is_an_encoder_epoch_of_the_cells(pretrained: dict) -> None:
    cells = pl.read_parquet(pretrained["dir"] / "tables" / "cells.parquet")
    keys = dense_keys(pretrained["config"])
    assert cells.height == len(keys) == 3
    assert sorted(cells["encoder_epoch"].to_list()) == [0, 2, EPOCHS]
    assert cells["cell_id"].n_unique() == 3
    for row in cells.iter_rows(named=True):
        for col in (c for c in cells.columns if c.endswith("_holds")):
            assert row[col] is not False, (col, row["encoder_epoch"])
    features = pretrained["dir"] / "dense" / "features"
    assert sorted(p.name for p in features.iterdir()) == ["epoch=0", "epoch=2", f"epoch={EPOCHS}"]


def test_ray_train_ran_every_epoch_on_two_workers(pretrained: dict) -> None:
    table = pl.read_parquet(pretrained["dir"] / "tables" / "pretrain.parquet")
    assert table["epoch"].to_list() == list(range(1, EPOCHS + 1))
    assert set(table["workers"]) == {2} and set(table["images"]) == {192}
    assert table["loss"].is_finite().all() and (table["images_per_second"] > 0).all()
    assert table["run_id"].n_unique() == 1
    page = (pretrained["dir"] / "report" / "index.html").read_text()
    assert "Pretrained encoders (dense cells)" in page and "pretrain_curve_dense.png" in page


def test_a_rerun_reuses_the_finished_pretraining(pretrained: dict) -> None:
    stages = pretrained["second"].stdout
    assert "(3 already done, 0 computed" in stages
    assert "continues after epoch" not in pretrained["second"].stderr
    after = (pretrained["dir"] / "tables" / "pretrain.parquet").read_bytes()
    assert after == pretrained["before"]["pretrain.parquet"]


def _weights(run_dir: Path, epoch: int) -> dict[str, torch.Tensor]:
    path = run_dir / "dense" / "pretrain" / "checkpoints" / f"epoch={epoch}.pt"
    return torch.load(path, map_location="cpu", weights_only=True)


def test_kill_9_during_pretraining_then_rerun_gives_the_same_weights(
    pretrained: dict, tmp_path: Path
) -> None:
    path = write_config(tmp_path, TINY)
    cfg = config.load(path)
    out = tmp_path / "killed"
    epochs = out / cfg.run_id() / "dense" / "pretrain" / "epochs"
    driver = crl_killable("run", str(path), "--out", str(out), "--quiet")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (epochs / "epoch=1.parquet").exists():
        assert driver.poll() is None, "the run ended before pretraining began"
        time.sleep(0.02)
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and the Ray processes it started
    driver.wait()
    finished = sorted(p.name for p in epochs.glob("*.parquet"))
    assert 1 <= len(finished) < EPOCHS, finished
    kept = {name: (epochs / name).read_bytes() for name in finished}

    rerun = crl("run", str(path), "--out", str(out))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "dense.pretrain continues after epoch" in rerun.stderr
    progress = [line for line in rerun.stderr.splitlines() if "pretrain dense (densecl)" in line]
    assert progress and all(" loss " in line and "images/s" in line for line in progress)
    for name, data in kept.items():  # a finished epoch is not trained again
        assert (epochs / name).read_bytes() == data
    for epoch in (0, 2, EPOCHS):
        a, b = _weights(out / cfg.run_id(), epoch), _weights(pretrained["dir"], epoch)
        assert all(torch.equal(a[k], b[k]) for k in a), epoch
    resumed = pl.read_parquet(out / cfg.run_id() / "tables" / "pretrain.parquet")
    reference = pl.read_parquet(pretrained["dir"] / "tables" / "pretrain.parquet")
    assert resumed["loss"].to_list() == reference["loss"].to_list()


def test_more_workers_than_cpus_exits_2_naming_the_field(tmp_path: Path) -> None:
    path = write_config(tmp_path, TINY)
    out = crl(
        "run",
        str(path),
        "--out",
        str(tmp_path / "runs"),
        "--set",
        "dense.pretrain.workers=8",
        timeout=120,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "dense.pretrain.workers" in lines[0], lines
