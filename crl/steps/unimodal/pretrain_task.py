"""What the grid's cells pretrain (encoder.pretrain, crl.steps.pretrain): the small_cnn encoder,
trained with NT-Xent on the pretraining split of a finite image source (digits, user Parquet;
crl.steps.data.source_rows), with the dataset's own augmentation (one-pixel shifts and noise,
crl.steps.data.augment_square) as the two views. The cells then fit their heads on the
features of each checkpoint (the axis encoder_epoch)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch

from crl.core.config import EncoderConfig
from crl.kernels.encoders import SmallCNN
from crl.steps.data import augment_square, list_to_numpy
from crl.steps.pretrain import load_weights


@dataclass(frozen=True)
class EncoderTask:
    """The small_cnn encoder on rows of `in_dim` pixels in [low, high]."""

    encoder: EncoderConfig
    in_dim: int
    low: float
    high: float
    family = "unimodal"

    @property
    def width(self) -> int:
        return self.encoder.out_dim

    def network(self) -> SmallCNN:
        """The encoder at its initialisation: the run's frozen random small_cnn."""
        return SmallCNN(self.in_dim, self.encoder.out_dim, self.encoder.seed)

    def inputs(self, data: Path) -> torch.Tensor:
        """The pretraining split's rows. Shape: (N, in_dim) float32."""
        files = sorted(data.glob("part-*.parquet"))
        if not files:
            raise FileNotFoundError(f"{data}: no pretraining shards")
        table = pa.concat_tables([pq.read_table(f) for f in files]).sort_by("id")
        return torch.from_numpy(list_to_numpy(table.column("x")).copy())

    def views(
        self, batch: torch.Tensor, gen: torch.Generator, dense: bool
    ) -> tuple[torch.Tensor, torch.Tensor, None]:
        """Two augmented views of each row (B, in_dim); no positions, so no correspondence."""
        if dense:
            raise ValueError("the small_cnn encoder has no position features for densecl")
        rows = batch.numpy()
        a = augment_square(rows, gen, self.low, self.high)
        b = augment_square(rows, gen, self.low, self.high)
        return torch.from_numpy(a), torch.from_numpy(b), None


def load_encoder(path: Path, task: EncoderTask) -> SmallCNN:
    """The encoder after the epochs of checkpoint `path` (weights only)."""
    return load_weights(task.network(), path)
