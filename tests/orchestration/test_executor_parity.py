"""A pretraining on Ray Train and the same pretraining with the local executor compute the same
float arithmetic: one torch thread a worker on both (crl.orchestration.train.WORKER_CPUS), so
their weights, losses and cells are equal bit for bit. With the machine's default threads in
the local executor they parted at epoch 2 by 1.6e-7 and, over 300 epochs, in every cell."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import torch
import yaml

from tests.conftest import crl
from tests.orchestration.test_node_loss_stages import STAGES

pytestmark = pytest.mark.slow

EPOCHS = 4
CONFIG = {
    **STAGES,
    "name": "parity",
    "encoder": {
        **STAGES["encoder"],
        "pretrain": {**STAGES["encoder"]["pretrain"], "epochs": EPOCHS, "checkpoints": [0, 4]},
    },
}


def test_ray_train_and_the_local_executor_train_the_same_weights(tmp_path: Path) -> None:
    path = tmp_path / "parity.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    runs = {}
    for executor in ("ray", "local"):
        out = tmp_path / executor
        done = crl("run", str(path), "--out", str(out), "--executor", executor, "--quiet")
        assert done.returncode == 0, done.stderr[-3000:]
        (runs[executor],) = out.iterdir()
    ray_run, local_run = runs["ray"], runs["local"]
    losses = [pl.read_parquet(r / "tables" / "pretrain.parquet")["loss"] for r in runs.values()]
    assert losses[0].to_list() == losses[1].to_list()
    trained = [
        torch.load(r / "pretrain" / "checkpoints" / f"epoch={EPOCHS}.pt") for r in runs.values()
    ]
    assert trained[0].keys() == trained[1].keys()
    assert all(torch.equal(trained[0][k], trained[1][k]) for k in trained[0])
    cells = [pl.read_parquet(r / "tables" / "cells.parquet") for r in (ray_run, local_run)]
    timing = [c for c in cells[0].columns if "second" in c or c == "device"]
    assert cells[0].drop(timing).equals(cells[1].drop(timing))
