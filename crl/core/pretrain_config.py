"""The `pretrain` sections of a `crl run` config: contrastive pretraining of the grid's encoder
(`encoder.pretrain`) or of the dense section's backbone (`dense.pretrain`), one schema for
both (crl.steps.pretrain runs it)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from crl.core.strict import Strict as _Strict
from crl.core.strict import non_empty_unique


class PretrainConfig(_Strict):
    """Contrastive pretraining on a split of images that no cell and no held-out evaluation ever
    draws from, on Ray Train (crl.steps.pretrain): of the dense section's random_conv backbone
    (`dense.pretrain`), or of the small_cnn encoder of the grid's cells (`encoder.pretrain`,
    nt_xent on the dataset's image rows, views by its augmentation: crl.steps.data).

    `objective`: "nt_xent" (SimCLR: the pooled features of two augmented views through an MLP
    projection; the negatives are every other image of the global batch, over all workers) or
    "densecl" ((1 - lam) global + lam dense InfoNCE against queues of `queue` keys from a
    momentum encoder; dense positives by the crops' geometric correspondence). Views are
    drawn afresh every epoch with `views`' augmentations. `images` pretraining images are
    generated (shapes: a stream of their own); finite sources (digits, user Parquet) give
    `fraction` of their rows, taken from train.
    `checkpoints`: the epochs after which the backbone is embedded and becomes the cells' axis
    encoder_epoch (0: the random initialisation). `batch` is the global batch, split evenly
    over `workers` (Ray Train workers, one GPU each when the cluster has GPUs and `use_gpu`
    is "auto" or true). Adam with peak learning rate `lr`: it rises linearly over the first
    `warmup` share of all steps, then stays (`schedule: constant`) or falls to 0 along a
    half cosine (`cosine`). DenseCL's queues start full of real keys (`queue_init: keys`: the
    momentum encoder's keys of `queue` pretraining images, before the first step) or of
    random unit vectors (`random`, easy negatives that the first epoch's keys replace).
    `augment` (encoder.pretrain only; the dense views are crops, `dense.views`): the two views
    of a row: "shift" (one-pixel shifts and noise, crl.steps.data.augment_square), "affine"
    (rotation, scale, shift, gain and offset: crl.kernels.views.affine_view) or "mask" (SCARF's
    coordinate replacement for vectors: crl.kernels.views.mask_view); None: affine for glyphs,
    shift for the small_cnn's other images, mask for the mlp's rows.
    """

    objective: Literal["nt_xent", "densecl"] = "densecl"
    epochs: int = Field(ge=1, le=10000)
    checkpoints: list[Annotated[int, Field(ge=0)]] | None = None
    images: int = Field(4096, ge=2)
    fraction: float = Field(0.3, gt=0, lt=1)
    batch: int = Field(64, ge=2)
    lr: float = Field(1e-3, gt=0)
    schedule: Literal["constant", "cosine"] = "constant"
    warmup: float = Field(0.0, ge=0, lt=1)
    queue_init: Literal["keys", "random"] = "keys"
    augment: Literal["shift", "affine", "mask"] | None = None
    temperature: float = Field(0.2, gt=0)
    lam: float = Field(0.5, ge=0, le=1)
    queue: int = Field(1024, ge=1)
    momentum: float = Field(0.99, ge=0, lt=1)
    projection: int = Field(64, ge=1)
    workers: int = Field(1, ge=1)
    use_gpu: Literal["auto"] | bool = "auto"
    seed: int = 0

    def given(self, field: str) -> bool:
        """Whether `field` was given a value other than its default (a config read back from a
        run folder's config.json has every default written out, and means the same)."""
        default = type(self).model_fields[field].default
        return field in self.model_fields_set and getattr(self, field) != default

    @property
    def embedded(self) -> list[int]:
        """The epochs whose encoder is embedded (the cells' encoder_epoch axis), in order."""
        return sorted(self.checkpoints or [0, self.epochs])

    @model_validator(mode="after")
    def _checkpoints(self) -> PretrainConfig:
        if self.checkpoints is not None:
            non_empty_unique(self.checkpoints)
        if self.embedded[-1] > self.epochs:
            raise ValueError(
                f"checkpoints: epoch {self.embedded[-1]} is after the last epoch ({self.epochs})"
            )
        if self.batch < 2 * self.workers:
            raise ValueError(f"batch: {self.batch} images over {self.workers} workers is < 2 each")
        return self
