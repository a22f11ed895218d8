"""The grid section of a run config: which (regime, loss) pairs, m, n, seeds, and the optional
axes R, temperature and normalise (re-exported by crl.core.config)."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field, field_validator, model_validator

from crl.core.strict import Strict as _Strict
from crl.core.strict import non_empty_unique

Regime = Literal["one_negative", "scrl", "sscrl"]
Loss = Literal["hinge", "logistic", "lse", "info_nce"]
REGIMES: tuple[str, ...] = get_args(Regime)
LOSSES: tuple[str, ...] = get_args(Loss)
# Which losses a regime admits. One negative with the LSE loss is the linear score Delta itself
# (unbounded, not a contrastive loss), so lse/info_nce need the multi-negative regimes.
VALID_OBJECTIVES = {
    "one_negative": ("hinge", "logistic"),
    "scrl": ("hinge", "logistic", "lse", "info_nce"),
    "sscrl": ("hinge", "logistic", "lse", "info_nce"),
}


Normalise = Literal["scale", "unit"]
NORMALISE: tuple[str, ...] = get_args(Normalise)
# the optional axes of the grid: each replaces one fixed setting (model.R, eval.temperature, the
# features' normalisation) in every cell, and joins the cell's key
GRID_AXES = ("R", "temperature", "normalise")


class GridConfig(_Strict):
    """The axes of the grid: every valid (regime, loss) pair times m x n x seeds, and optionally
    times R (the head's norm bound; default model.R), temperature (default eval.temperature) and
    normalise, how vector features are put in the unit ball: "scale" (centre on the train mean,
    divide by the largest norm of the splits; the default) or "unit" (centre, then project onto
    the unit sphere)."""

    regimes: list[Regime]
    losses: list[Loss]
    m: list[Annotated[int, Field(ge=1)]]
    n: list[Annotated[int, Field(ge=1)]]
    seeds: list[int] = [0]
    R: list[Annotated[float, Field(gt=0)]] | None = None
    temperature: list[Annotated[float, Field(gt=0)]] | None = None
    normalise: list[Normalise] | None = None
    # cells kept: m <= m_max_over_n * n, and n * m <= scrl_max_negatives for scrl cells
    m_max_over_n: float | None = Field(None, gt=0)
    scrl_max_negatives: int | None = Field(None, ge=1)

    @field_validator("regimes", "losses", "m", "n", "seeds")
    @classmethod
    def _non_empty_unique(cls, value: list) -> list:
        return non_empty_unique(value)

    @field_validator("R", "temperature", "normalise")
    @classmethod
    def _axis(cls, value: list | None) -> list | None:
        return None if value is None else non_empty_unique(value)

    @model_validator(mode="after")
    def _some_valid_objective(self) -> GridConfig:
        if not objectives(self):
            raise ValueError(
                f"no valid (regime, loss) pair in regimes={self.regimes} losses={self.losses}; "
                f"valid pairs: {VALID_OBJECTIVES}"
            )
        return self


def objectives(grid: GridConfig) -> list[tuple[str, str]]:
    """The (regime, loss) pairs of the grid, in config order, restricted to VALID_OBJECTIVES."""
    return [(r, loss) for r in grid.regimes for loss in grid.losses if loss in VALID_OBJECTIVES[r]]
