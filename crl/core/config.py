"""The one typed config schema: read from YAML, overridden with dotted keys, validated once, hashed.

Every error is one line naming the field (dotted path), the value and what was expected.
The dataset sections are crl.core.datasets (re-exported here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, model_validator

from crl.core.check_config import CheckConfig as CheckConfig
from crl.core.check_config import ConstantsConfig as ConstantsConfig
from crl.core.check_config import check_overrides as check_overrides
from crl.core.check_config import load_checks as load_checks
from crl.core.datasets import DATASET_KINDS as DATASET_KINDS
from crl.core.datasets import PAIRED_KINDS as PAIRED_KINDS
from crl.core.datasets import Dataset as Dataset
from crl.core.datasets import DigitsData as DigitsData
from crl.core.datasets import GlyphsData as GlyphsData
from crl.core.datasets import PairedGaussianData as PairedGaussianData
from crl.core.datasets import PairedParquetData as PairedParquetData
from crl.core.datasets import ParquetData as ParquetData
from crl.core.datasets import SyntheticData as SyntheticData
from crl.core.datasets import is_paired as is_paired
from crl.core.dense_config import DenseConfig
from crl.core.errors import ConfigError as ConfigError
from crl.core.fingerprints import input_fingerprints
from crl.core.grid_config import GRID_AXES as GRID_AXES
from crl.core.grid_config import LOSSES as LOSSES
from crl.core.grid_config import NORMALISE as NORMALISE
from crl.core.grid_config import REGIMES as REGIMES
from crl.core.grid_config import VALID_OBJECTIVES as VALID_OBJECTIVES
from crl.core.grid_config import GridConfig as GridConfig
from crl.core.grid_config import objectives as objectives
from crl.core.ladder_config import LadderConfig as LadderConfig
from crl.core.overrides import parse_override, with_overrides
from crl.core.places import PATH_FIELDS, resolved_fields
from crl.core.pretrain_config import PretrainConfig
from crl.core.run_config import Run, drop, read_yaml
from crl.core.strict import Strict as _Strict
from crl.core.validation import validated


class EncoderConfig(_Strict):
    """Frozen backbone applied in the embed stage; the cell then fits a norm-bounded linear head.

    `pretrain` (small_cnn on square images, mlp on any rows): the encoder trained with NT-Xent
    on rows that the cells never draw from (crl.steps.unimodal.pretrain_task): a finite source
    (digits, glyphs, user Parquet) gives `pretrain.fraction` of its train rows, the synthetic
    source `pretrain.images` draws of its own. Each checkpoint is embedded and becomes the
    cells' axis encoder_epoch (0: the random initialisation)."""

    kind: Literal["identity", "random_features", "small_cnn", "mlp"] = "identity"
    out_dim: int = Field(128, ge=1)
    seed: int = 0
    batch_rows: int = Field(4096, ge=1)
    pretrain: PretrainConfig | None = None


class ModelConfig(_Strict):
    """The class F = {x -> W phi(x) : ||W||_F <= R} with ||phi(x)|| <= 1, so sup ||f(x)|| <= R;
    for paired data the score model s(x, y) = x^T M y - y^T B y with ||(M, B)||_F <= R.

    solver "adam": `steps` projected Adam steps on minibatches of `batch`; "apg": accelerated
    projected gradient on the whole sample until the gradient-mapping norm is below `tol` (at
    most `max_iter` iterations), so that n is not confounded with a training budget.
    `R_times_bayes` (paired_gaussian only) sets R to that multiple of the Bayes score's norm.
    """

    d: int = Field(16, ge=1)
    R: float = Field(1.0, gt=0)
    R_times_bayes: float | None = Field(None, gt=0)
    solver: Literal["adam", "apg"] = "adam"
    steps: int = Field(100, ge=0)
    batch: int = Field(128, ge=1)
    lr: float = Field(0.05, gt=0)
    tol: float = Field(1e-5, gt=0)
    max_iter: int = Field(4000, ge=1)


MStarMetric = Literal["excess_auc", "excess_risk", "auc_error", "probe_error", "classifier_error"]
M_STAR_METRICS: tuple[str, ...] = get_args(MStarMetric)
# the m* metrics each kind of grid cell measures (single-modality datasets: "unimodal")
GRID_METRICS: dict[str, tuple[str, ...]] = {
    "paired_gaussian": ("excess_auc", "excess_risk", "auc_error"),
    "paired_parquet": ("auc_error",),
    "unimodal": ("auc_error", "probe_error", "classifier_error"),
}


class MStarConfig(_Strict):
    """The critical number of negatives m*(n) (docs/theory/m-star.md section 3): per n, the
    smallest m after which the seed-mean metric (lower is better) stays within (1 + delta) of its
    plateau (the mean over the two largest m), with a bootstrap over seeds; the exponent of
    m* ~ n^a by log-log least squares refitted in every replicate; a sensitivity row per `deltas`
    entry.
    `metrics` None: excess_auc for paired_gaussian data, auc_error (1 - retrieval AUC) else."""

    metrics: list[MStarMetric] | None = Field(None, min_length=1)
    delta: float = Field(0.25, gt=0)
    deltas: list[Annotated[float, Field(gt=0)]] = Field([0.1, 0.25, 0.5], min_length=1)
    bootstrap: int = Field(1000, ge=1)  # crl.kernels.saturation needs a replicate
    confidence: float = Field(0.95, gt=0, lt=1)


class EvalConfig(_Strict):
    """How a fitted cell is evaluated: held-out loss, R_S(F) draws, bounds, downstream."""

    temperature: float = Field(0.5, gt=0)
    delta: float = Field(0.05, gt=0, lt=1)
    test_anchors: int = Field(2000, ge=1)
    negative_pool: int = Field(1024, ge=1)
    probe_points: int = Field(4000, ge=2)
    rademacher_draws: int = Field(64, ge=2)
    pool_bootstrap: int = Field(200, ge=0)
    # synthetic data: fit one head per (loss, m, setting) on this many fresh anchors, whose
    # held-out loss stands for the best head's in the ball (`oracle_loss`); None: none
    oracle_anchors: int | None = Field(None, ge=2)
    # the certificate ladder's PAC-Bayes and uniform-deviation rungs; None: those columns give
    # their reason
    ladder: LadderConfig | None = None
    m_star: MStarConfig = MStarConfig()


class RuntimeConfig(_Strict):
    """Resources of one cell task."""

    cell_cpus: float = Field(1.0, gt=0)


class Config(Run):
    """A `crl run` config: dataset, encoder, learner, grid, evaluation, runtime; and/or a
    `dense` section (crl.core.dense_config). `dataset` and `grid` go together; a config with
    only a `dense` section runs dense cells alone."""

    _HASH_OMITS_NONE = (
        "dense",
        *(f"grid.{axis}" for axis in GRID_AXES),
        "dense.grid.R",
        "dense.grid.temperature",
        "dense.pretrain",
        "encoder.pretrain",
        "encoder.pretrain.augment",
        "dense.pretrain.augment",
        "dataset.clip",
        "eval.oracle_anchors",
        "eval.ladder",
        "dense.eval.ladder",
        "inputs",
        "families",
    )

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", max_length=100)
    seed: int = 0
    dataset: Dataset | None = None
    encoder: EncoderConfig = EncoderConfig()
    model: ModelConfig = ModelConfig()
    grid: GridConfig | None = None
    eval: EvalConfig = EvalConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    dense: DenseConfig | None = None
    # the sections of families registered as plugins (crl.steps.families), by family name;
    # each family validates its own section
    families: dict[str, dict[str, Any]] | None = None
    # {config field: content fingerprint} of the external files the run reads, set by `load`
    # (crl.core.fingerprints); part of the hash, so a changed file gives a new run. A value
    # written in the YAML is replaced.
    inputs: dict[str, str] | None = None

    def _hashed_tree(self) -> dict:
        """The validated config less the places of the inputs it fingerprints: a run's identity
        is what it reads, not where it read it from (crl.core.places)."""
        tree = super()._hashed_tree()
        for field in set(PATH_FIELDS) & set(self.inputs or ()):
            drop(tree, field)
        return tree

    @model_validator(mode="after")
    def _sections(self) -> Config:
        if (self.dataset is None) != (self.grid is None):
            missing, given = ("dataset", "grid") if self.dataset is None else ("grid", "dataset")
            raise ValueError(f"{missing}: required key is missing (it goes with {given})")
        if self.grid is None and self.dense is None and not self.families:
            raise ValueError("grid: required key is missing (or give a dense section)")
        return self

    @model_validator(mode="after")
    def _paired_model(self) -> Config:
        if self.grid is None:
            return self
        paired = is_paired(self.dataset)
        if self.model.R_times_bayes is not None and self.dataset.kind != "paired_gaussian":
            raise ValueError("model.R_times_bayes: only for dataset.kind paired_gaussian")
        if paired and self.model.solver != "apg":
            raise ValueError("model.solver: the paired score model is fitted by 'apg' only")
        if paired and set(self.grid.losses) != {"lse"}:
            raise ValueError(f"grid.losses: paired data takes ['lse'] (got {self.grid.losses})")
        if paired and "one_negative" in self.grid.regimes:
            raise ValueError("grid.regimes: paired data takes scrl and sscrl")
        if paired and self.grid.normalise is not None:
            raise ValueError("grid.normalise: paired data is used as given (no normalisation)")
        if self.model.R_times_bayes is not None and self.grid.R is not None:
            raise ValueError("grid.R: give either grid.R or model.R_times_bayes, not both")
        return self

    @model_validator(mode="after")
    def _encoder_pretrain(self) -> Config:
        p = self.encoder.pretrain
        if p is None:
            return self
        if self.encoder.kind not in ("small_cnn", "mlp"):
            raise ValueError(
                f"encoder.pretrain: only the small_cnn and mlp encoders are pretrained "
                f"(encoder.kind is {self.encoder.kind})"
            )
        kind = None if self.dataset is None else self.dataset.kind
        sources = ("digits", "glyphs", "parquet")
        if self.encoder.kind == "mlp":
            sources = ("synthetic", *sources)
        if kind not in sources:
            raise ValueError(
                f"encoder.pretrain: the {self.encoder.kind} encoder pretrains on dataset.kind "
                f"{' or '.join(sources)}, not {kind}"
            )
        if p.objective != "nt_xent":
            raise ValueError(
                f"encoder.pretrain.objective: {p.objective} needs position features (the dense "
                f"backbone); the {self.encoder.kind} encoder pretrains with nt_xent"
            )
        if kind == "synthetic" and p.given("fraction"):
            raise ValueError(
                "encoder.pretrain.fraction: synthetic rows are drawn; give encoder.pretrain.images"
            )
        if kind != "synthetic" and p.given("images"):
            raise ValueError(
                "encoder.pretrain.images: the pretraining rows come from the dataset; give "
                "encoder.pretrain.fraction (the share of its train rows pretraining takes)"
            )
        return self

    def pretrain_augment(self) -> str:
        """The views of encoder.pretrain: its `augment`, or affine for glyphs, shift for the
        small_cnn's other images, mask for the mlp's rows."""
        p = self.encoder.pretrain
        if p is None:
            raise ValueError("encoder.pretrain: not set")
        if p.augment is not None:
            return p.augment
        if getattr(self.dataset, "kind", None) == "glyphs":
            return "affine"
        return "shift" if self.encoder.kind == "small_cnn" else "mask"

    @model_validator(mode="after")
    def _ladder_on_grid_cells(self) -> Config:
        if self.eval.ladder is not None and self.grid is None:
            raise ValueError(
                "eval.ladder: the PAC-Bayes and uniform-deviation rungs are built for grid "
                "cells only (this config has no grid)"
            )
        return self

    @model_validator(mode="after")
    def _oracle_needs_the_law(self) -> Config:
        if self.eval.oracle_anchors is not None and not isinstance(self.dataset, SyntheticData):
            kind = None if self.dataset is None else self.dataset.kind
            raise ValueError(
                f"eval.oracle_anchors: needs fresh draws from a known law (dataset.kind "
                f"synthetic), not {kind}"
            )
        return self

    @model_validator(mode="after")
    def _m_star_metrics_exist(self) -> Config:
        """Every m* metric must be a column the grid's cells have."""
        if self.grid is None or self.eval.m_star.metrics is None:
            return self
        kind = self.dataset.kind
        have = GRID_METRICS.get(kind, GRID_METRICS["unimodal"])
        absent = [m for m in self.eval.m_star.metrics if m not in have]
        if absent:
            raise ValueError(
                f"eval.m_star.metrics: {absent} are not measured by {kind} cells "
                f"(they have {list(have)})"
            )
        return self

    def pretrainings(self) -> dict[str, PretrainConfig]:
        """The run's contrastive pretrainings by config section: encoder.pretrain (the grid's
        encoder), dense.pretrain (the dense backbone)."""
        found = {}
        if self.grid is not None and self.encoder.pretrain is not None:
            found["encoder.pretrain"] = self.encoder.pretrain
        if self.dense is not None and self.dense.pretrain is not None:
            found["dense.pretrain"] = self.dense.pretrain
        return found

    def draws_hash(self) -> str:
        """The hash that keys the cells' random draws: the config's without its pretraining
        sections and its certificate ladders (`eval.ladder`, `dense.eval.ladder`). Every
        checkpoint of a pretraining, every pretraining recipe, the same config without
        pretraining and with or without a ladder then draw the same samples, negatives and
        heads' starts (common random numbers: epoch 0 is the frozen encoder's cells exactly, and
        the differences between epochs are paired; the ladder's rungs draw from generators of
        their own, so a ladder adds columns and moves none). Equal to `hash()` without
        pretraining and ladders."""
        update: dict = {
            "encoder": self.encoder.model_copy(update={"pretrain": None}),
            "eval": self.eval.model_copy(update={"ladder": None}),
        }
        if self.dense is not None:
            dense_eval = self.dense.eval.model_copy(update={"ladder": None})
            update["dense"] = self.dense.model_copy(update={"pretrain": None, "eval": dense_eval})
        return self.model_copy(update=update).hash()

    def m_star_metrics(self) -> list[str]:
        """The metrics whose m*(n) the fits table reports (eval.m_star.metrics or the default)."""
        if self.eval.m_star.metrics is not None:
            return list(self.eval.m_star.metrics)
        paired_gaussian = self.dataset is not None and self.dataset.kind == "paired_gaussian"
        return ["excess_auc"] if paired_gaussian else ["auc_error"]


def validate(tree: dict) -> Config:
    """The validated config of a YAML tree. Raises ConfigError (one line)."""
    return validated(Config, tree)


# The fields that decide which code a run imports and calls: the dense backbone's module.
CODE_FIELDS = ("dense.backbone.kind", "dense.backbone.module", "dense.backbone.module_kwargs")


def overrides_naming_code(config: Config, overrides: list[str]) -> list[str]:
    """The keys of `overrides` that chose the code `config` runs: when its dense backbone is a
    user module (kind "module"), every override on the path to CODE_FIELDS (`dense`,
    `dense.backbone`, the fields themselves, or keys inside `module_kwargs`). Empty when the
    module, if any, comes from the config file alone."""
    if config.dense is None or config.dense.backbone.kind != "module":
        return []
    keys = [parse_override(text)[0] for text in overrides]
    return [
        key
        for key in keys
        if any(f == key or f.startswith(key + ".") or key.startswith(f + ".") for f in CODE_FIELDS)
    ]


def load(path: str | Path, overrides: list[str] = (), base: str | Path | None = None) -> Config:
    """Read YAML at `path`, apply dotted `overrides`, make the paths it names absolute (relative
    to `base`, by default the working directory: crl.core.places), validate, and fingerprint the
    inputs it names (`Config.inputs`). Raises ConfigError (one line)."""
    tree = resolved_fields(with_overrides(read_yaml(path), list(overrides)), base)
    return with_inputs(validate(tree))


def with_inputs(config: Config) -> Config:
    """`config` with `inputs` set to the fingerprints of the files it reads now."""
    return config.model_copy(update={"inputs": input_fingerprints(config)})
