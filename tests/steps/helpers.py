"""Tiny configs and materialised runs shared by the steps tests (no Ray, no Prefect)."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

from crl.core.config import Config, validate
from crl.steps import data, pretrain

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


def naive_dense_loss(W, phi1, phi2, match, neg, negatives: str, T: float) -> float:
    """The D4 loss by loops in float64: mean over images of the mean over matched positions."""
    total = 0.0
    for i in range(phi1.shape[0]):
        negs = neg if neg.ndim == 2 else neg[i]
        terms = []
        for a in range(phi1.shape[1]):
            b = int(match[i, a])
            if b < 0:
                continue
            q = W @ phi1[i, a]
            pos = float(q @ (W @ phi2[i, b])) / T
            others = [float(q @ (W @ x)) / T for x in negs]
            if negatives == "own":
                others += [float(q @ (W @ phi2[i, c])) / T for c in range(phi2.shape[1]) if c != b]
            terms.append(math.log(sum(math.exp(s - pos) for s in [pos, *others])))
        total += sum(terms) / len(terms)
    return total / phi1.shape[0]


class Dies(pretrain.SingleProcess):
    """A training worker killed once epoch `last` is trained, before that epoch's files (the
    epoch's sums over workers are its last step: one call per epoch)."""

    def __init__(self, last: int) -> None:
        super().__init__()
        self.last, self.epochs = last, 0

    def total(self, values: list[float]) -> list[float]:
        self.epochs += 1
        if self.epochs == self.last:
            raise KeyboardInterrupt("killed")
        return values
