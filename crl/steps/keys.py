"""The key of a unimodal or paired grid cell and the grid's keys in order. A cell's id is a hash
of the config hash and its key, so a rerun of the same config finds its finished cells."""

from __future__ import annotations

from dataclasses import dataclass

from crl.core.config import Config, GridConfig, objectives
from crl.kernels.seeding import short_hash


@dataclass(frozen=True)
class CellKey:
    """A cell of the (regime, loss, m, n, seed) grid (unimodal and paired families)."""

    regime: str
    loss: str
    m: int
    n: int
    seed: int

    def cell_id(self, config_hash: str) -> str:
        return short_hash(config_hash, self.regime, self.loss, self.m, self.n, self.seed)


def grid_keys(config: Config) -> list[CellKey]:
    """Every cell of the config's grid, in grid order (none without a grid)."""
    g = config.grid
    if g is None:
        return []
    return [
        CellKey(regime, loss, m, n, seed)
        for regime, loss in objectives(g)
        for m in g.m
        for n in g.n
        if _kept(g, regime, m, n)
        for seed in g.seeds
    ]


def _kept(grid: GridConfig, regime: str, m: int, n: int) -> bool:
    """Whether (m, n) is inside the grid's limits: m <= m_max_over_n * n, and n m <=
    scrl_max_negatives for scrl (whose negatives take memory n m)."""
    if grid.m_max_over_n is not None and m > grid.m_max_over_n * n:
        return False
    return not (
        regime == "scrl" and grid.scrl_max_negatives is not None and n * m > grid.scrl_max_negatives
    )
