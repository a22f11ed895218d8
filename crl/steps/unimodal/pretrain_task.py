"""What the grid's cells pretrain (encoder.pretrain, crl.steps.pretrain): the small_cnn encoder
on square images (digits, glyphs, user Parquet) or the mlp encoder on any rows (the synthetic
source too), trained with NT-Xent on the pretraining split, which the cells never draw from
(crl.steps.data.pretrain_inputs). The two views of a row come from `augment`: one-pixel shifts
and noise (crl.steps.data.augment_square), random affine transforms with gain and offset
(crl.kernels.views.affine_view), or SCARF's coordinate replacement (crl.kernels.views.mask_view).
The cells then fit their heads on the features of each checkpoint (the axis encoder_epoch)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import nn

from crl.core.config import EncoderConfig
from crl.kernels.encoders import build_encoder
from crl.kernels.views import affine_view, mask_view
from crl.steps.data import augment_square, list_to_numpy
from crl.steps.pretrain import load_weights


@dataclass(frozen=True)
class EncoderTask:
    """The grid's encoder on rows of `in_dim` values in [low, high], with `augment`'s views."""

    encoder: EncoderConfig
    augment: str  # "shift", "affine" or "mask"
    in_dim: int
    low: float
    high: float
    family = "unimodal"

    @property
    def width(self) -> int:
        return self.encoder.out_dim

    def network(self) -> nn.Module:
        """The encoder at its initialisation: the run's frozen random small_cnn or mlp."""
        return build_encoder(
            self.encoder.kind, self.in_dim, self.encoder.out_dim, self.encoder.seed
        )

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
            raise ValueError(
                f"the {self.encoder.kind} encoder has no position features for densecl"
            )
        return self._view(batch, gen), self._view(batch, gen), None

    def _view(self, batch: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        if self.augment == "shift":
            return torch.from_numpy(augment_square(batch.numpy(), gen, self.low, self.high))
        if self.augment == "affine":
            return affine_view(batch, gen, self.low, self.high)
        if self.augment == "mask":
            return mask_view(batch, gen)
        raise ValueError(f"augment: unknown {self.augment!r}")


def load_encoder(path: Path, task: EncoderTask) -> nn.Module:
    """The encoder after the epochs of checkpoint `path` (weights only)."""
    return load_weights(task.network(), path)
