"""The quickstart's heads learn (issue: heads that learn): its scrl LSE and InfoNCE cells at
n = 800 reach a retrieval AUC of at least 0.75 with gain intervals above 0, bounds holding."""

from __future__ import annotations

from pathlib import Path

import pytest

from crl.core.config import load
from crl.steps.features import load_features, tau_of
from crl.steps.keys import grid_keys
from crl.steps.unimodal import cell
from tests.conftest import REPO
from tests.steps.helpers import materialise


@pytest.mark.parametrize("loss", ["lse", "info_nce"])
def test_the_quickstarts_scrl_heads_learn_and_stay_certified(tmp_path: Path, loss: str) -> None:
    cfg = load(REPO / "conf" / "quickstart.yaml")
    features = load_features(materialise(cfg, tmp_path))
    tau = tau_of(cfg, features.train.labels)
    keys = [
        k for k in grid_keys(cfg) if (k.regime, k.loss, k.n) == ("scrl", loss, 800) and k.m == 16
    ]
    assert len(keys) == len(cfg.grid.seeds)
    rows = [cell.run_cell(cfg, key, features, tau) for key in keys]
    for row in rows:
        assert row["retrieval_auc"] >= 0.75, row["retrieval_auc"]
        assert row["learned"] and row["learning_gain"] - row["learning_gain_ci"] > 0
        assert row["certified"] and row["best_bound"] < row["loss_range"]
        assert row["gamma_S_holds"] and row["gamma_m_holds"] and row["gamma_E_holds"]
