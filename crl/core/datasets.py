"""The dataset sections of a `crl run` config, one class per `dataset.kind`."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field, field_validator, model_validator

from crl.core.strict import Strict as _Strict


class SyntheticData(_Strict):
    """Latent-class model with Gaussian class laws (tau = sum rho^2 known exactly)."""

    kind: Literal["synthetic"]
    classes: int = Field(8, ge=2)
    dim: int = Field(32, ge=1)
    separation: float = Field(2.0, gt=0)
    noise: float = Field(1.0, gt=0)
    prior: Literal["uniform", "zipf"] = "uniform"
    zipf_exponent: float = Field(1.0, gt=0)
    train_size: int = Field(4000, ge=2)
    test_size: int = Field(2000, ge=2)
    shards: int = Field(4, ge=1)


class DigitsData(_Strict):
    """scikit-learn's handwritten digits (ships inside the package, no download)."""

    kind: Literal["digits"]
    positives: Literal["same_class", "augmented"] = "same_class"
    test_fraction: float = Field(0.3, gt=0, lt=1)
    shards: int = Field(4, ge=1)


class GlyphsData(_Strict):
    """Procedural grayscale glyphs (crl.kernels.glyphs): one shape per image, its class, under
    random position, rotation, scale, contrast, background, `clutter` blobs and pixel noise of
    `noise`; a finite source of `train_size` + `test_size` images rendered from the run seed,
    on which a random encoder separates the classes poorly and pretraining can show."""

    kind: Literal["glyphs"]
    classes: int = Field(8, ge=2, le=8)
    side: int = Field(16, ge=8, le=64)
    clutter: int = Field(3, ge=0, le=16)
    noise: float = Field(0.1, ge=0, le=1)
    train_size: int = Field(8000, ge=2)
    test_size: int = Field(2000, ge=2)
    shards: int = Field(4, ge=1)


class ParquetData(_Strict):
    """Any user Parquet: a feature column (list of numbers) or an image column, and a label."""

    kind: Literal["parquet"]
    path: str
    label_column: str = "label"
    feature_column: str | None = "x"
    image_column: str | None = None
    split_column: str | None = None
    test_fraction: float = Field(0.3, gt=0, lt=1)
    shards: int = Field(4, ge=1)

    @model_validator(mode="after")
    def _one_input_column(self) -> ParquetData:
        if (self.feature_column is None) == (self.image_column is None):
            raise ValueError("give exactly one of feature_column and image_column")
        return self


class PairedGaussianData(_Strict):
    """Li et al.'s paired two-modality Gaussian in canonical form (docs/theory/m-star.md):
    x ~ N(0, I_p), y = V (rho * U^T x + sqrt(1 - rho^2) eps), with Haar-random U, V when
    `rotate`. Its Bayes score, population LSE risk and L* are exact; cells draw fresh pairs and
    score every fitted model on one seeded set of `eval_triples` (x, y, y') triples."""

    kind: Literal["paired_gaussian"]
    correlations: list[Annotated[float, Field(gt=0, lt=1)]] = [0.9, 0.7, 0.5, 0.3]
    rotate: bool = True
    eval_triples: int = Field(300_000, ge=100)
    # radially clip x, y and every y' to the ball of this radius, then scale into the unit ball
    # (crl.kernels.latent.clipped): a bounded law whose cells carry certified bounds
    clip: float | None = Field(None, gt=0)

    @field_validator("correlations")
    @classmethod
    def _non_empty(cls, value: list[float]) -> list[float]:
        if not value:
            raise ValueError("must not be empty")
        return value


class PairedParquetData(_Strict):
    """User pairs (CLIP-style embeddings): a Parquet file or folder with two columns of numeric
    lists, x and y, one pair per row, no labels. Each modality is centred and scaled into the
    unit ball on the train split (test rows radially clipped), as the bounds require."""

    kind: Literal["paired_parquet"]
    path: str
    x_column: str = "x"
    y_column: str = "y"
    split_column: str | None = None
    test_fraction: float = Field(0.3, gt=0, lt=1)
    shards: int = Field(4, ge=1)
    eval_triples: int = Field(100_000, ge=2)


Dataset = Annotated[
    SyntheticData | DigitsData | GlyphsData | ParquetData | PairedGaussianData | PairedParquetData,
    Field(discriminator="kind"),
]
PAIRED_KINDS: tuple[str, ...] = ("paired_gaussian", "paired_parquet")


def is_paired(dataset: object) -> bool:
    """Whether a dataset is a paired two-modality source (the score model s = x^T M y - y^T B y)."""
    return getattr(dataset, "kind", None) in PAIRED_KINDS


DATASET_KINDS: tuple[str, ...] = tuple(
    get_args(kind.model_fields["kind"].annotation)[0] for kind in get_args(get_args(Dataset)[0])
)
