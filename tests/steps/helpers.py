"""Tiny configs and materialised runs shared by the steps tests (no Ray, no Prefect)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from crl.core.config import Config, validate
from crl.steps import data

TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 0,
    "dataset": {
        "kind": "synthetic",
        "classes": 3,
        "dim": 6,
        "separation": 2.0,
        "noise": 0.5,
        "train_size": 60,
        "test_size": 40,
        "shards": 2,
    },
    "model": {"d": 3, "R": 1.0, "steps": 5, "batch": 16, "lr": 0.05},
    "grid": {
        "regimes": ["one_negative", "scrl", "sscrl"],
        "losses": ["hinge", "lse"],
        "m": [1, 3],
        "n": [10, 20],
        "seeds": [0, 1],
    },
    "eval": {
        "temperature": 0.5,
        "delta": 0.05,
        "test_anchors": 20,
        "negative_pool": 16,
        "probe_points": 20,
        "rademacher_draws": 4,
    },
}


def tree(**sections: Any) -> dict[str, Any]:
    """TINY with some sections updated: tree(dataset={"dim": 30}) changes one key of dataset."""
    out = copy.deepcopy(TINY)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and "kind" not in value:
            out[key].update(value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def config(**sections: Any) -> Config:
    """The validated TINY config with some sections updated (see `tree`)."""
    return validate(tree(**sections))


def materialise(cfg: Config, root: Path) -> Path:
    """Write every shard of `cfg`'s dataset under root/data (staging root/.staging)."""
    job = data.ShardJob(cfg.dataset, cfg.seed, root / "data", root / ".staging")
    for spec in data.shard_plan(cfg.dataset, data.split_sizes(cfg.dataset)):
        data.write_shard(spec, job)
    return root / "data"
