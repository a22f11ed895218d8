"""The embed step: a frozen encoder over one data shard, written to features/ atomically.

`Embedder` is a plain class, one per worker: it keeps one encoder per input width and runs it on
the worker's device (CUDA when the worker has a GPU). The executor decides how many run where.
With encoder.pretrain, every chosen checkpoint of the pretrained encoder embeds every shard, into
features/epoch=<e>/ (`features_dir_of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import nn

from crl.core.config import EncoderConfig
from crl.kernels.encoders import build_encoder
from crl.steps import data, store
from crl.steps.atomic import write_parquet_atomic

INPUT_COLUMNS = ("x", "view_a", "view_b")


@dataclass(frozen=True)
class EmbedItem:
    """One shard under one encoder: the frozen encoder (epoch None) or the pretrained encoder
    after `epoch` epochs."""

    epoch: int | None
    shard: Path


def features_dir_of(features_root: Path, epoch: int | None) -> Path:
    """Where the features of the encoder after `epoch` epochs go (features_root/epoch=<e>/), or
    those of the frozen encoder (None: features_root itself)."""
    return features_root if epoch is None else features_root / f"epoch={epoch}"


def build(config: EncoderConfig, in_dim: int) -> nn.Module:
    """The frozen encoder of `config` for inputs of `in_dim` values."""
    return build_encoder(config.kind, in_dim, config.out_dim, config.seed)


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
    """Embeds shards: `embedder(item)` writes the shard's features under the item's encoder and
    returns their path. `checkpoints`: the pretrained encoder's weights by epoch."""

    def __init__(
        self,
        config: EncoderConfig,
        data_dir: Path,
        features_dir: Path,
        staging: Path,
        checkpoints: dict[int, Path] | None = None,
    ) -> None:
        self.config = config
        self.data_dir, self.features_dir, self.staging = data_dir, features_dir, staging
        self.checkpoints = checkpoints or {}
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.modules: dict[tuple[int | None, int], nn.Module] = {}

    def _module(self, epoch: int | None, width: int) -> nn.Module:
        if (epoch, width) not in self.modules:
            if epoch is not None:  # one pretrained encoder at a time: items come by epoch
                self.modules = {k: v for k, v in self.modules.items() if k[0] is None}
            module = build(self.config, width)
            if epoch is not None:
                module.load_state_dict(
                    torch.load(
                        store.fetch(self.checkpoints[epoch]), map_location="cpu", weights_only=True
                    )
                )
            self.modules[epoch, width] = module
        return self.modules[epoch, width]

    def __call__(self, item: EmbedItem | Path) -> str:
        item = item if isinstance(item, EmbedItem) else EmbedItem(None, item)
        table = pq.read_table(store.fetch(item.shard))  # a worker of another node: from the store
        columns = {"id": table.column("id"), "label": table.column("label")}
        for name in INPUT_COLUMNS:
            if name not in table.column_names:
                continue
            x = data.list_to_numpy(table.column(name))
            module = self._module(item.epoch, x.shape[1])
            phi = embed(module, x, self.config.batch_rows, self.device)
            columns[name] = data.list_column(phi)
        features = features_dir_of(self.features_dir, item.epoch)
        target = features_path(self.data_dir, features, item.shard)
        write_parquet_atomic(pa.table(columns), target, self.staging)
        return str(target)
