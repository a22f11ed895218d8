"""What the two grid families (unimodal and paired) share: the `dataset` and `grid` sections'
source checks and the shards of a data source with rows (every source but the paired Gaussian,
whose cells draw their own)."""

from __future__ import annotations

from crl.core.config import Config
from crl.core.errors import ConfigError
from crl.steps import data
from crl.steps.family import MapWork, is_complete
from crl.steps.run_paths import RunPaths


def pretrain_fraction(config: Config) -> float | None:
    """The share of the train rows that encoder.pretrain takes (None without it, or when its
    rows are synthetic draws of their own)."""
    p = config.encoder.pretrain
    return None if p is None or config.dataset.kind == "synthetic" else p.fraction


def shard_work(config: Config, paths: RunPaths) -> MapWork:
    """The data shards not yet on disk (a pretraining split shrinks the train shards)."""
    fraction = pretrain_fraction(config)
    plan = data.shard_plan(config.dataset, data.split_sizes(config.dataset, fraction))
    todo = [s for s in plan if not is_complete(data.shard_path(paths.data, s), s.rows)]
    job = data.ShardJob(config.dataset, config.seed, paths.data, paths.staging, fraction)
    return MapWork("shards", data.write_shard, todo, job)


def check_sizes(config: Config) -> None:
    """n within the train split (what pretraining leaves of it) where the cells draw from it
    (synthetic cells draw fresh points of the law: any n), a test split, no empty shard, a
    pretraining batch within the pretraining split."""
    pretrain = config.encoder.pretrain
    fraction = pretrain_fraction(config)
    sizes = data.split_sizes(config.dataset, fraction)
    from_split = config.dataset.kind != "synthetic"
    if from_split and max(config.grid.n) > sizes["train"]:
        left = " after encoder.pretrain.fraction" if pretrain is not None else ""
        raise ConfigError(
            f"config field grid.n: n={max(config.grid.n)} is larger than the train split "
            f"({sizes['train']} rows{left}) can serve (anchors are drawn without replacement)"
        )
    if pretrain is not None:
        rows = data.pretrain_count(config.dataset, pretrain)
        if rows < pretrain.batch:
            field = "images" if config.dataset.kind == "synthetic" else "fraction"
            raise ConfigError(
                f"config field encoder.pretrain.batch: {pretrain.batch} is larger than the "
                f"pretraining split ({rows} rows; encoder.pretrain.{field})"
            )
    if sizes["test"] < 2:
        raise ConfigError(f"dataset: the test split has {sizes['test']} rows; need at least 2")
    if config.dataset.shards > min(sizes.values()):
        raise ConfigError(
            f"config field dataset.shards: {config.dataset.shards} shards, but a split has only "
            f"{min(sizes.values())} rows"
        )
