"""`theorem_checks`: every statement of THEORY.md on generated instances, fanned out over Ray."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from crl import checks, pipeline, pipeline_checks, report, runtime
from crl import config as crl_config


@task(name="instances", cache_policy=NO_CACHE)
def run_instances(
    config: crl_config.CheckConfig, paths: pipeline_checks.CheckPaths, progress: bool
) -> tuple[int, int]:
    given = {k: v for k, v in config.constants.model_dump().items() if v is not None}
    return pipeline_checks.run_units(config, paths, checks.Constants(**given), progress)


@task(name="aggregate", cache_policy=NO_CACHE)
def aggregate(config: crl_config.CheckConfig, paths: pipeline_checks.CheckPaths) -> list[dict]:
    prov = runtime.provenance(config.hash(), config.run_id())
    out = pipeline_checks.write_tables(paths, prov)
    return out["checks_summary"].drop(list(prov)).to_dicts()


@task(name="report", cache_policy=NO_CACHE)
def render(paths: pipeline_checks.CheckPaths) -> str:
    return str(report.build_checks(paths.tables, paths.report, paths.staging))


@flow(name="theorem_checks", log_prints=True)
def theorem_checks(
    config_path: str | None = None,
    out: str = "runs",
    instances: int | None = None,
    ray_address: str | None = None,
    progress: bool = True,
    overrides: list[str] | None = None,
) -> dict:
    """Run (or resume) the statement checks; returns the per-statement summary and failures."""
    extra = [f"instances={instances}"] if instances else []
    config = crl_config.load_checks(config_path, [*(overrides or []), *extra])
    paths = pipeline_checks.prepare(config, Path(out))
    where = runtime.ray_init(ray_address)
    units, computed = run_instances(config, paths, progress)
    summary = aggregate(config, paths)
    page = render(paths)
    pipeline.clean_staging(paths)
    return {
        "run_dir": str(paths.root),
        "units": units,
        "computed": computed,
        "summary": summary,
        "report": page,
        "where": where,
    }
