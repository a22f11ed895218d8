"""The base of every config section: unknown keys, mutation and non-finite floats are errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    # allow_inf_nan=False: `inf` and `nan` pass every float bound otherwise (R=.inf, T=.inf)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
