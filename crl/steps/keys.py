"""The key of a unimodal or paired grid cell and the grid's keys in order. A cell's id is a hash
of the config hash and its key, so a rerun of the same config finds its finished cells."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from crl.core.config import GRID_AXES, Config, GridConfig, objectives
from crl.kernels.seeding import short_hash


@dataclass(frozen=True)
class CellKey:
    """A cell of the (regime, loss, m, n, seed) grid (unimodal and paired families), and of the
    optional axes R, temperature, normalise and encoder_epoch: None where the grid does not have
    the axis (the cell takes model.R, eval.temperature, "scale", the frozen encoder), so that
    the ids of grids without them do not change."""

    regime: str
    loss: str
    m: int
    n: int
    seed: int
    R: float | None = None
    temperature: float | None = None
    normalise: str | None = None
    oracle: bool = False  # the oracle head of its (loss, m, setting): see `oracle_keys`
    encoder_epoch: int | None = None  # with encoder.pretrain: the checkpoint the features are of

    def cell_id(self, config_hash: str) -> str:
        axes = [
            (axis, value)
            for axis in (*GRID_AXES, "encoder_epoch")
            if (value := getattr(self, axis)) is not None
        ]
        role = [("oracle", True)] if self.oracle else []
        return short_hash(
            config_hash, self.regime, self.loss, self.m, self.n, self.seed, *axes, *role
        )

    def normalisation(self) -> str:
        """How the cell's vector features are put in the unit ball."""
        return self.normalise or "scale"


def draws_id(config: Config, key: Any) -> str:
    """What keys the random draws of the cell `key` (a CellKey or a dense key): its id at
    encoder_epoch None under `config.draws_hash()`, so the cells of every checkpoint of a
    pretraining, of every recipe and of the config without pretraining draw alike (common
    random numbers). The cell's own id without pretraining and ladders."""
    return replace(key, encoder_epoch=None).cell_id(config.draws_hash())


def cell_config(config: Config, key: CellKey) -> Config:
    """`config` as the cell sees it: model.R and eval.temperature replaced by the key's R and
    temperature where the grid has those axes. Its hash is not the run's: a cell's id comes from
    the run's config (`key.cell_id(config.hash())`)."""
    model, ev = config.model, config.eval
    if key.R is not None:
        model = model.model_copy(update={"R": key.R})
    if key.temperature is not None:
        ev = ev.model_copy(update={"temperature": key.temperature})
    return config.model_copy(update={"model": model, "eval": ev})


def grid_keys(config: Config) -> list[CellKey]:
    """Every cell of the config's grid, in grid order (with encoder.pretrain: once per embedded
    checkpoint, epoch by epoch), then its oracle cells (none without a grid)."""
    g = config.grid
    if g is None:
        return []
    p = config.encoder.pretrain
    epochs = [None] if p is None else p.embedded
    return [
        *(replace(key, encoder_epoch=e) for e in epochs for key in _grid_cells(g)),
        *oracle_keys(config),
    ]


def oracle_keys(config: Config) -> list[CellKey]:
    """With `eval.oracle_anchors` = N: the cells whose heads stand for the best head in the
    ball, fitted on N fresh anchors (seed 0), for the `oracle_loss` of the grid's cells.

    The target is what the cells' test loss estimates. Hinge, logistic and InfoNCE: L_m(f), the
    same for every regime, so one oracle per (loss, m, setting) with m own negatives per anchor
    (scrl sampling). LSE: Li et al.'s L(f), which does not depend on m, so one oracle per
    setting fitted against one shared pool of `eval.negative_pool` negatives (sscrl sampling
    with m = the pool: the empirical L(f) of the held-out estimate), not against m negatives,
    whose minimiser is L_m's.
    """
    g, anchors = config.grid, config.eval.oracle_anchors
    if g is None or anchors is None:
        return []
    losses = list(dict.fromkeys(loss for _, loss in objectives(g)))
    pool = config.eval.negative_pool
    return [
        CellKey(regime, loss, m, anchors, 0, R, temperature, normalise, oracle=True)
        for loss in losses
        for R in g.R or [None]
        for temperature in g.temperature or [None]
        for normalise in g.normalise or [None]
        for regime, m in ([("sscrl", pool)] if loss == "lse" else [("scrl", m) for m in g.m])
    ]


def _grid_cells(g: GridConfig) -> list[CellKey]:
    return [
        CellKey(regime, loss, m, n, seed, R, temperature, normalise)
        for regime, loss in objectives(g)
        for R in g.R or [None]
        for temperature in g.temperature or [None]
        for normalise in g.normalise or [None]
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
