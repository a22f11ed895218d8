"""The base of every config section: unknown keys, mutation and non-finite floats are errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    # allow_inf_nan=False: `inf` and `nan` pass every float bound otherwise (R=.inf, T=.inf)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def non_empty_unique(value: list) -> list:
    """A grid axis: at least one entry, none repeated (a field validator's body)."""
    if not value:
        raise ValueError("must not be empty")
    if len(set(value)) != len(value):
        raise ValueError(f"has repeated entries {value}")
    return value
