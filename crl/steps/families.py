"""The registry of cell families: the one place that lists them. The stages, the run folder's
checks and the cells step ask it which families a run has; none of them names a family.

A family is an object that keeps the contract of crl.steps.family. The built-in ones are
unimodal, paired and dense, in that order (a run's cells are ordered by family, then by each
family's own key order). More come from `CRL_FAMILIES`, a comma-separated list of
`module:attribute` (e.g. `mylab.crl_families:FAMILY`), read at import: each is imported in the
driver and in every worker that runs a cell (the module must be importable there, e.g. by
PYTHONPATH), and takes its settings from the config's `families.<name>` section.
"""

from __future__ import annotations

import importlib
import os

from crl.core.config import Config
from crl.core.errors import ConfigError
from crl.steps.dense.family import FAMILY as DENSE
from crl.steps.family import CellKey, Family
from crl.steps.paired.family import FAMILY as PAIRED
from crl.steps.unimodal.family import FAMILY as UNIMODAL

BUILT_IN: tuple[Family, ...] = (UNIMODAL, PAIRED, DENSE)
PLUGINS_VARIABLE = "CRL_FAMILIES"


def _plugin(spec: str) -> Family:
    module, _, attribute = spec.strip().partition(":")
    try:
        family = getattr(importlib.import_module(module), attribute or "FAMILY")
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"{PLUGINS_VARIABLE}: cannot load the family {spec!r} ({err})") from None
    if not isinstance(family, Family):
        raise ConfigError(
            f"{PLUGINS_VARIABLE}: {spec!r} is not a family (see crl.steps.family.Family)"
        )
    return family


def registered() -> tuple[Family, ...]:
    """The built-in families, then those of CRL_FAMILIES, in order."""
    specs = [s for s in os.environ.get(PLUGINS_VARIABLE, "").split(",") if s.strip()]
    found = (*BUILT_IN, *(_plugin(s) for s in specs))
    names = [f.name for f in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"{PLUGINS_VARIABLE}: more than one family is named {twice}")
    return found


def active(config: Config) -> list[Family]:
    """The families the run has cells of, in registry order. A `families.<name>` section of
    the config must name a registered family."""
    found = registered()
    names = {f.name for f in found}
    unknown = sorted(set(config.families or {}) - names)
    if unknown:
        raise ConfigError(
            f"config field families.{unknown[0]}: no such family is registered "
            f"(registered: {sorted(names)}; plugins come from {PLUGINS_VARIABLE})"
        )
    return [f for f in found if f.active(config)]


def check(config: Config) -> None:
    """Every active family's checks of the config that can fail before work starts."""
    for family in active(config):
        family.check(config)


def cell_keys(config: Config) -> list[tuple[Family, CellKey]]:
    """Every cell of the run with its family, in order."""
    return [(family, key) for family in active(config) for key in family.keys(config)]


def summarised() -> list[str]:
    """The registered families' own columns that the summary aggregates over seeds."""
    return [c for family in registered() for c in family.columns.summarised]


def checked_holds() -> list[str]:
    """The registered families' own certified inequalities."""
    return [c for family in registered() for c in family.columns.holds]
