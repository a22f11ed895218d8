"""A family defined outside crl, to prove that a new family is a module and one registry line
(`CRL_FAMILIES=tests.families.toy:FAMILY`): the mean of n draws of Uniform[0, width], its gap to
the true mean width/2, and Hoeffding's bound width sqrt(log(2/delta) / (2n)), which holds with
probability at least 1 - delta.

Its config section is `families.toy: {n: [...], seeds: [...], width: w, draws: N}`; it
materializes one shard of N draws, embeds nothing, and its cells read n of those draws, chosen
by the cell's seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crl.core.config import Config
from crl.core.errors import ConfigError
from crl.kernels.seeding import generator, short_hash
from crl.steps.atomic import write_parquet_atomic
from crl.steps.family import Columns, MapWork, Pretraining, WorkerWork, is_complete
from crl.steps.pages import html_table
from crl.steps.report_page import Page
from crl.steps.run_paths import RunPaths


class ToySection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: list[int] = Field(min_length=1)
    seeds: list[int] = [0]
    width: float = Field(1.0, gt=0)
    draws: int = Field(1000, gt=0)


@dataclass(frozen=True)
class ToyKey:
    n: int
    seed: int

    def cell_id(self, config_hash: str) -> str:
        return short_hash(config_hash, "toy", self.n, self.seed)


@dataclass(frozen=True)
class ToyShardJob:
    seed: int
    section: ToySection
    staging: Path


@dataclass(frozen=True)
class ToyContext:
    config_hash: str
    delta: float
    width: float
    draws: np.ndarray  # (draws,) float64


def section(config: Config) -> ToySection:
    try:
        return ToySection.model_validate(config.families["toy"])
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"config field families.toy.{where}: {first['msg']}") from None


def shard(paths: RunPaths) -> Path:
    return paths.root / "toy" / "draws.parquet"


def write_draws(path: Path, job: ToyShardJob) -> str:
    gen = np.random.default_rng([job.seed, 7])
    draws = gen.uniform(0.0, job.section.width, size=job.section.draws)
    write_parquet_atomic(pa.table({"x": draws}), path, job.staging)
    return str(path)


class Toy:
    name = "toy"
    columns = Columns(summarised=("toy_hoeffding",), holds=("toy_hoeffding_holds",))

    def active(self, config: Config) -> bool:
        return "toy" in (config.families or {})

    def check(self, config: Config) -> None:
        s = section(config)
        if max(s.n) > s.draws:
            raise ConfigError(f"config field families.toy.n: {max(s.n)} > draws ({s.draws})")

    def keys(self, config: Config) -> list[ToyKey]:
        s = section(config)
        return [ToyKey(n, seed) for n in s.n for seed in s.seeds]

    def materialize(self, config: Config, paths: RunPaths) -> list[MapWork]:
        path = shard(paths)
        todo = [] if is_complete(path, section(config).draws) else [path]
        job = ToyShardJob(config.seed, section(config), paths.staging)
        return [MapWork("toy draws", write_draws, todo, job)]

    def pretrainings(self, config: Config, paths: RunPaths) -> list[Pretraining]:
        return []

    def embed(self, config: Config, paths: RunPaths) -> list[WorkerWork]:
        return []

    def context(self, config: Config, paths: RunPaths) -> ToyContext:
        draws = pq.read_table(shard(paths))["x"].to_numpy()
        return ToyContext(config.hash(), config.eval.delta, section(config).width, draws)

    def run_cell(self, key: ToyKey, context: ToyContext) -> dict:
        gen = generator(context.config_hash, "toy", key.seed)
        chosen = torch.randperm(len(context.draws), generator=gen)[: key.n].numpy()
        mean = float(context.draws[chosen].mean())
        gap = abs(mean - context.width / 2)
        bound = context.width * math.sqrt(math.log(2 / context.delta) / (2 * key.n))
        return {
            "cell_id": key.cell_id(context.config_hash),
            "family": "toy",
            "dataset": "uniform",
            "regime": "iid",
            "loss": "mean",
            "m": 1,  # one value: the aggregate fits slopes in (m, n)
            "n": key.n,
            "seed": key.seed,
            "gap": gap,
            "toy_hoeffding": bound,
            "toy_hoeffding_holds": gap <= bound,
        }

    def report(self, summary: pl.DataFrame, fits: pl.DataFrame, page: Page) -> list[str]:
        view = summary.select(["n", "seeds", "gap_mean", "toy_hoeffding_mean"])
        return ["<h1>Toy cells</h1>" + html_table(view)]


FAMILY = Toy()
