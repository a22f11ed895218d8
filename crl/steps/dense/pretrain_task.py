"""What the dense section pretrains (dense.pretrain, crl.steps.pretrain): the random_conv
backbone, on the pretraining split's images (uint8 pixels), with the views of `dense.views`
(random resized crops and flips, crl.kernels.dense.crops) and, for DenseCL, the crops' geometric
correspondence as the dense positives."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from crl.core.dense_config import DenseConfig
from crl.kernels.dense import crops
from crl.kernels.encoders import RandomConv
from crl.steps.data import list_to_numpy
from crl.steps.pretrain import load_weights


def backbone(dense: DenseConfig, channels: int) -> RandomConv:
    """The backbone at its initialisation (epoch 0): the run's random_conv."""
    b = dense.backbone
    return RandomConv(channels, b.channels, b.layers, b.downsample, b.grid, b.seed)


def load_checkpoint(path: Path, dense: DenseConfig, channels: int) -> RandomConv:
    """The backbone after the epochs of checkpoint `path` (weights only)."""
    return load_weights(backbone(dense, channels), path)


@dataclass(frozen=True)
class DenseTask:
    """The dense backbone on images of `channels` channels."""

    dense: DenseConfig
    channels: int
    family = "dense"

    @property
    def width(self) -> int:
        return self.dense.backbone.channels

    def network(self) -> RandomConv:
        return backbone(self.dense, self.channels)

    def inputs(self, data: Path) -> torch.Tensor:
        """The pretraining split's images. Shape: (N, c, S, S) uint8."""
        files = sorted(data.glob("part-*.parquet"))
        if not files:
            raise FileNotFoundError(f"{data}: no pretraining shards")
        table = pa.concat_tables([pq.read_table(f) for f in files]).sort_by("id")
        pixels = np.ascontiguousarray(list_to_numpy(table.column("image"), np.uint8)).copy()
        side = int(round((pixels.shape[1] / self.channels) ** 0.5))
        return torch.from_numpy(pixels).reshape(-1, self.channels, side, side)

    def views(
        self, batch: torch.Tensor, gen: torch.Generator, dense: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Two crops of each image (B, c, size, size) and, with `dense`, the correspondence."""
        views = self.dense.views
        x = batch.float().div_(255.0)
        labels = torch.zeros(x.shape[0], x.shape[2], x.shape[3], dtype=torch.int64)
        v1, v2 = crops.two_views(
            x, labels, views.size, gen, tuple(views.scale), tuple(views.ratio), views.flip
        )
        grid = (self.dense.backbone.grid, self.dense.backbone.grid)
        match = crops.grid_correspondence(v1, v2, grid) if dense else None
        return v1.images, v2.images, match
