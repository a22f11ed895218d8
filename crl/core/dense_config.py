"""The `dense:` section of a `crl run` config: dense contrastive cells
(docs/theory/dense-bounds.md).

Images with two augmented views each (random resized crops and flips, boxes recorded), a frozen
convolutional backbone giving an H x W grid of position features per view, and cells over the
(m, n) grid: n training images, m external negatives per image (regime scrl) or one queue of m
shared by the images of the cell (regime sscrl); negatives "own" (the other positions of view 2
plus the external ones) or "ext" (DenseCL: external only); correspondence geometric or argmax;
DenseCL's combined objective (1 - lambda) L_global + lambda L_dense with lambda a grid axis.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field, field_validator, model_validator

from crl.core.ladder_config import PacBayesConfig
from crl.core.pretrain_config import PretrainConfig
from crl.core.strict import Strict as _Strict
from crl.core.strict import non_empty_unique


class ShapesImages(_Strict):
    """crl's procedural images (crl.kernels.dense.images): objects with per-pixel class labels."""

    kind: Literal["shapes"]
    size: int = Field(48, ge=8, le=512)
    classes: int = Field(4, ge=1, le=16)
    objects: tuple[int, int] = (1, 3)
    train_size: int = Field(512, ge=2)
    test_size: int = Field(128, ge=2)
    pool_size: int = Field(4096, ge=2)
    shards: int = Field(2, ge=1)

    @field_validator("objects")
    @classmethod
    def _objects(cls, value: tuple[int, int]) -> tuple[int, int]:
        if not (0 <= value[0] <= value[1] and value[1] >= 1):
            raise ValueError("expected [low, high] with 0 <= low <= high and high >= 1")
        return value


class DigitsImages(_Strict):
    """scikit-learn's 8x8 digits upscaled to `size` (bilinear); pixel label = digit + 1 where
    the ink is above half its maximum, 0 (background) elsewhere."""

    kind: Literal["digits"]
    size: int = Field(32, ge=8, le=512)
    test_fraction: float = Field(0.2, gt=0, lt=1)
    pool_fraction: float = Field(0.3, gt=0, lt=1)
    shards: int = Field(2, ge=1)


class ParquetImages(_Strict):
    """User images: a Parquet file or folder with a column of square images flattened to lists of
    numbers in [0, 1] (side^2 grey or 3 side^2 RGB, channel first) and, optionally, per-pixel
    integer labels (side^2 values) for the dense probe. Rows are split at random into train,
    test and the negative pool."""

    kind: Literal["parquet"]
    path: str
    image_column: str = "image"
    label_column: str | None = None
    test_fraction: float = Field(0.2, gt=0, lt=1)
    pool_fraction: float = Field(0.3, gt=0, lt=1)
    shards: int = Field(2, ge=1)


Images = Annotated[ShapesImages | DigitsImages | ParquetImages, Field(discriminator="kind")]
IMAGE_KINDS: tuple[str, ...] = tuple(
    get_args(kind.model_fields["kind"].annotation)[0] for kind in get_args(get_args(Images)[0])
)


class ViewsConfig(_Strict):
    """Two random resized crops per image (DenseCL's scale (0.2, 1)), flipped with `flip`."""

    size: int = Field(32, ge=8, le=512)
    scale: tuple[float, float] = (0.2, 1.0)
    ratio: tuple[float, float] = (0.75, 4.0 / 3.0)
    flip: float = Field(0.5, ge=0, le=1)

    @field_validator("scale", "ratio")
    @classmethod
    def _interval(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not (0 < value[0] <= value[1]):
            raise ValueError("expected [low, high] with 0 < low <= high")
        return value

    @field_validator("scale")
    @classmethod
    def _fraction(cls, value: tuple[float, float]) -> tuple[float, float]:
        if value[1] > 1:
            raise ValueError("a crop's share of the image's area is at most 1")
        return value


class BackboneConfig(_Strict):
    """The frozen backbone: a seeded random conv net ("random_conv": `layers` 3x3 conv + ReLU
    layers of `channels`, the first `downsample` of them with stride 2), or a user network
    ("module": `module` = "package.module:Class", a subclass of torch.nn.Module checked before it
    is called, built with `module_kwargs`; no weights are downloaded; docs/cluster.md's trust model
    says who may name one). Its feature map is average-pooled to a `grid` x `grid` grid; each
    position feature is centred on the train mean, then put in the unit ball (D1) by `normalise`:
    "scale" divides every feature by the largest norm over the run (norms keep their spread),
    "unit" divides each feature by its own norm (every norm 1, as DenseCL's normalised
    embeddings; a zero feature stays zero)."""

    kind: Literal["random_conv", "module"] = "random_conv"
    channels: int = Field(64, ge=1)
    layers: int = Field(3, ge=1, le=8)
    downsample: int = Field(2, ge=0, le=6)
    module: str | None = None
    module_kwargs: dict = {}
    grid: int = Field(4, ge=1, le=32)
    normalise: Literal["scale", "unit"] = "scale"
    seed: int = 0
    batch_rows: int = Field(256, ge=1)

    @model_validator(mode="after")
    def _module_named(self) -> BackboneConfig:
        if self.kind == "module" and not self.module:
            raise ValueError("module: kind 'module' needs module: 'package.module:Class'")
        if self.kind == "module" and ":" not in self.module:
            raise ValueError(f"module: {self.module!r} is not 'package.module:Class'")
        return self


class DenseHead(_Strict):
    """The head W phi_k with ||W||_F <= R (D2), fitted by accelerated projected gradient on all
    n images until the gradient-mapping norm is below `tol` (at most `max_iter` iterations)."""

    d: int = Field(16, ge=1)
    R: float = Field(1.0, gt=0)
    tol: float = Field(1e-4, gt=0)
    max_iter: int = Field(300, ge=1)


class DenseGrid(_Strict):
    """Axes of the dense grid: regimes x negatives x correspondence x lambdas x m x n x seeds,
    and optionally x R (the head's bound; default head.R) x temperature (default
    eval.temperature). The features' normalisation is the backbone's (`backbone.normalise`)."""

    regimes: list[Literal["scrl", "sscrl"]] = ["scrl"]
    negatives: list[Literal["own", "ext"]] = ["own", "ext"]
    correspondence: list[Literal["geometric", "argmax"]] = ["geometric"]
    lambdas: list[Annotated[float, Field(ge=0, le=1)]] = [1.0]
    m: list[Annotated[int, Field(ge=1)]]
    n: list[Annotated[int, Field(ge=2)]]
    seeds: list[int] = [0]
    R: list[Annotated[float, Field(gt=0)]] | None = None
    temperature: list[Annotated[float, Field(gt=0)]] | None = None

    @field_validator("regimes", "negatives", "correspondence", "lambdas", "m", "n", "seeds")
    @classmethod
    def _non_empty_unique(cls, value: list) -> list:
        return non_empty_unique(value)

    @field_validator("R", "temperature")
    @classmethod
    def _axis(cls, value: list | None) -> list | None:
        return None if value is None else non_empty_unique(value)


class DenseEval(_Strict):
    """Held-out evaluation: `test_images` images with fresh negatives (and the test-set
    certificate on them); the MI bound on up to `mi_images` of them, each with m negatives of
    its own from the pool (disjoint); `ladder`: the PAC-Bayes rungs of the certificate ladder on
    the i.i.d. (scrl) cells (crl.steps.dense.ladder)."""

    temperature: float = Field(0.5, gt=0)
    delta: float = Field(0.05, gt=0, lt=1)
    test_images: int = Field(128, ge=2)
    mi_images: int = Field(128, ge=2)
    ladder: PacBayesConfig | None = None


class DenseConfig(_Strict):
    """Dense contrastive cells of a run; their rows have family "dense" in the same tables."""

    images: Images
    views: ViewsConfig = ViewsConfig()
    backbone: BackboneConfig = BackboneConfig()
    head: DenseHead = DenseHead()
    grid: DenseGrid
    eval: DenseEval = DenseEval()
    pretrain: PretrainConfig | None = None

    @model_validator(mode="after")
    def _pretrain_source(self) -> DenseConfig:
        p = self.pretrain
        if p is None:
            return self
        if p.augment is not None:
            raise ValueError("pretrain.augment: the dense views are crops; set dense.views")
        if isinstance(self.images, ShapesImages) and p.given("fraction"):
            raise ValueError("pretrain.fraction: shapes are generated; give pretrain.images")
        if not isinstance(self.images, ShapesImages) and p.given("images"):
            raise ValueError(
                f"pretrain.images: {self.images.kind} images are a finite source; give "
                "pretrain.fraction (the share of its rows pretraining takes from train)"
            )
        return self
