"""The pretrain stage with the local executor (no Ray): reuse and repair of its files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from crl.core.config import Config
from crl.orchestration import stages
from crl.orchestration.executor import LocalExecutor
from crl.steps.runfolder import RunPaths
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
    job = stages.pretrain_job(config, paths)
    kept = torch.load(job.checkpoint(2), weights_only=True)
    job.checkpoint(2).unlink()
    assert stages.pretrain(config, paths, LocalExecutor(), progress=False) == 2
    assert "pretraining again from the start" in capsys.readouterr().err
    again = torch.load(job.checkpoint(2), weights_only=True)
    assert all(torch.equal(kept[k], again[k]) for k in kept)
