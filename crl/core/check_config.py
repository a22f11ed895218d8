"""The config of `crl check` (flow theorem_checks): which statements, how many instances each,
from which seed, and the statements' constants."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from crl.core.errors import ConfigError
from crl.core.overrides import with_overrides
from crl.core.run_config import Run, read_yaml
from crl.core.strict import Strict
from crl.core.validation import validated


class ConstantsConfig(Strict):
    """Constants of the statements; unset means the true one. Wrong values show checks can fail."""

    contraction: float | None = Field(None, ge=0)
    calibration_factor: float | None = Field(None, ge=0)
    collision_c0: float | None = Field(None, ge=0)
    gamma_scale: float | None = Field(None, ge=0)
    confidence: float | None = Field(None, gt=0, lt=1)


class CheckConfig(Run):
    """`crl check`: which statements, how many instances each, from which seed."""

    name: str = Field("checks", pattern=r"^[A-Za-z0-9_.-]+$", max_length=100)
    seed: int = Field(0, ge=0)
    statements: list[str] | None = None  # None: every statement
    instances: int | None = Field(None, ge=1)  # None: each statement's default count
    chunk: int = Field(20, ge=1)  # instances per Ray task
    constants: ConstantsConfig = ConstantsConfig()

    @field_validator("statements")
    @classmethod
    def _non_empty(cls, value: list[str] | None) -> list[str] | None:
        # names are checked against the registry by the check stage (crl.steps.check_unit):
        # the schema stays free of the math layer
        if value is not None and not value:
            raise ValueError("must not be empty")
        return value


def check_overrides(overrides: list[str], instances: int | None) -> list[str]:
    """`overrides` plus `instances=N` for the --instances option (None: each default count)."""
    if instances is None:
        return list(overrides)
    if not (isinstance(instances, int) and instances >= 1):
        raise ConfigError(f"--instances {instances}: expected an integer >= 1")
    return [*overrides, f"instances={instances}"]


def load_checks(path: str | Path | None, overrides: list[str] = ()) -> CheckConfig:
    """The check config at `path` (defaults when None), with dotted overrides."""
    tree = with_overrides(read_yaml(path) if path is not None else {}, list(overrides))
    return validated(CheckConfig, tree)
