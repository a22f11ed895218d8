"""The embed step: a frozen encoder over one data shard, written to features/ atomically.

`Embedder` is a plain class, one per worker: it keeps one encoder per input width and runs it on
the worker's device (CUDA when the worker has a GPU). The executor decides how many run where.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import nn

from crl.core.config import EncoderConfig
from crl.kernels.encoders import RandomFeatures, SmallCNN
from crl.steps import data
from crl.steps.atomic import write_parquet_atomic

INPUT_COLUMNS = ("x", "view_a", "view_b")


def build(config: EncoderConfig, in_dim: int) -> nn.Module:
    """The frozen encoder of `config` for inputs of `in_dim` values."""
    if config.kind == "identity":
        return nn.Identity()
    if config.kind == "random_features":
        return RandomFeatures(in_dim, config.out_dim, config.seed)
    return SmallCNN(in_dim, config.out_dim, config.seed)


@torch.no_grad()
def embed(module: nn.Module, x: np.ndarray, batch_rows: int, device: str = "cpu") -> np.ndarray:
    """Apply `module` to rows of x in batches. Shape: x (N, in) -> (N, out) float32, N >= 1.

    `x` may be read-only (Arrow-backed): each batch is copied only when it is not writable.
    """
    module = module.to(device).eval()
    out = [
        module(torch.from_numpy(np.require(x[i : i + batch_rows], requirements="W")).to(device))
        .float()
        .cpu()
        for i in range(0, x.shape[0], batch_rows)
    ]
    return torch.cat(out).numpy()


def features_path(data_dir: Path, features_dir: Path, shard: Path) -> Path:
    """features/split=<split>/part-<k>.parquet for data/split=<split>/part-<k>.parquet."""
    return features_dir / shard.relative_to(data_dir)


class Embedder:
    """Embeds shards: `embedder(shard)` writes the shard's features and returns their path."""

    def __init__(
        self, config: EncoderConfig, data_dir: Path, features_dir: Path, staging: Path
    ) -> None:
        self.config = config
        self.data_dir, self.features_dir, self.staging = data_dir, features_dir, staging
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.modules: dict[int, nn.Module] = {}

    def _module(self, width: int) -> nn.Module:
        if width not in self.modules:
            self.modules[width] = build(self.config, width)
        return self.modules[width]

    def __call__(self, shard: Path) -> str:
        table = pq.read_table(shard)
        columns = {"id": table.column("id"), "label": table.column("label")}
        for name in INPUT_COLUMNS:
            if name not in table.column_names:
                continue
            x = data.list_to_numpy(table.column(name))
            phi = embed(self._module(x.shape[1]), x, self.config.batch_rows, self.device)
            columns[name] = data.list_column(phi)
        target = features_path(self.data_dir, self.features_dir, shard)
        write_parquet_atomic(pa.table(columns), target, self.staging)
        return str(target)
