"""`bound_grid`: materialize -> embed -> cells -> aggregate -> report, each stage a Prefect task.

Ray fans out inside a stage; only this driver talks to Prefect.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from crl import config as crl_config
from crl import pipeline, report, runtime, tables


@dataclass(frozen=True)
class GridResult:
    run_dir: str
    cells_total: int
    cells_skipped: int
    cells_computed: int
    failures: list[dict]
    bounds_checked: int
    bounds_held: int
    report: str
    where: str


@task(name="materialize", cache_policy=NO_CACHE)
def materialize(config: crl_config.Config, paths: pipeline.RunPaths) -> int:
    return pipeline.materialize(config, paths)


@task(name="embed", cache_policy=NO_CACHE)
def embed(config: crl_config.Config, paths: pipeline.RunPaths) -> int:
    return pipeline.embed(config, paths)


@task(name="cells", cache_policy=NO_CACHE)
def cells(
    config: crl_config.Config, paths: pipeline.RunPaths, progress: bool
) -> pipeline.CellsOutcome:
    return pipeline.run_cells(config, paths, pipeline.load_features(paths), progress=progress)


@task(name="aggregate", cache_policy=NO_CACHE)
def aggregate(config: crl_config.Config, paths: pipeline.RunPaths) -> tuple[int, int]:
    prov = runtime.provenance(config.hash(), config.run_id())
    out = tables.write_tables(
        paths.cells, paths.tables, paths.staging, prov, config.eval.performance_metric
    )
    checked = out["cells"]["bound_holds"].drop_nulls().cast(int)
    return checked.len(), int(checked.sum() or 0)


@task(name="report", cache_policy=NO_CACHE)
def render(paths: pipeline.RunPaths) -> str:
    return str(report.build(paths.tables, paths.report, paths.staging))


@flow(name="bound_grid", log_prints=True)
def bound_grid(
    config_path: str,
    overrides: list[str] | None = None,
    out: str = "runs",
    ray_address: str | None = None,
    progress: bool = True,
) -> dict:
    """Run (or resume) the (m, n) grid of a config; returns a summary of what happened."""
    config = crl_config.load(config_path, overrides or [])
    paths = pipeline.prepare(config, Path(out))
    where = runtime.ray_init(ray_address)
    materialize(config, paths)
    embed(config, paths)
    outcome = cells(config, paths, progress)
    checked, held = aggregate(config, paths)
    page = render(paths)
    pipeline.clean_staging(paths)
    return asdict(
        GridResult(
            str(paths.root),
            outcome.total,
            outcome.skipped,
            outcome.computed,
            outcome.failures,
            checked,
            held,
            page,
            where,
        )
    )
