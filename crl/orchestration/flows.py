"""The Prefect flows `bound_grid` and `theorem_checks`: each stage a Prefect task whose body is one
call into crl.orchestration.stages; the fan-out inside a stage is the executor's (Ray by default).

Deployments point at the entrypoint files flows/bound_grid.py and flows/theorem_checks.py, which
re-export these. Prefect-level caching and retries are off on purpose (NO_CACHE, no retries):
resumption is by files (a finished unit is skipped) and system faults are retried by Ray.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from crl.core import config as crl_config
from crl.core.places import resolved
from crl.orchestration import artifacts, deploy, runtime, stages
from crl.orchestration.executor import Executor, make_executor
from crl.orchestration.runtime import is_local
from crl.steps import aggregate as aggregate_step
from crl.steps import catalogue, check_report, check_tables, report
from crl.steps.run_paths import CheckPaths, RunPaths
from crl.steps.runfolder import prepare_check_run, prepare_run


@dataclass(frozen=True)
class GridResult:
    """What a bound_grid run did; `report` is empty when no cell finished."""

    run_dir: str
    cells_total: int
    cells_skipped: int
    cells_computed: int
    failures: list[dict]
    bounds_checked: int
    bounds_held: int
    report: str
    where: str
    stage_seconds: dict[str, float]


class _StageClock:
    """Wall seconds of each stage of a flow, in order."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = now - self._last
        self._last = now


@dataclass(frozen=True)
class CheckResult:
    """What a theorem_checks run did: per-statement summary rows and where the report is."""

    run_dir: str
    units: int
    computed: int
    summary: list[dict]
    report: str
    where: str


@task(name="materialize", cache_policy=NO_CACHE)
def materialize(config: crl_config.Config, paths: RunPaths, executor: Executor) -> int:
    return stages.materialize(config, paths, executor)


@task(name="pretrain", cache_policy=NO_CACHE)
def pretrain(config: crl_config.Config, paths: RunPaths, executor: Executor, progress: bool) -> int:
    return stages.pretrain(config, paths, executor, progress)


@task(name="embed", cache_policy=NO_CACHE)
def embed(config: crl_config.Config, paths: RunPaths, executor: Executor, progress: bool) -> int:
    return stages.embed(config, paths, executor, progress)


@task(name="cells", cache_policy=NO_CACHE)
def cells(
    config: crl_config.Config,
    paths: RunPaths,
    executor: Executor,
    progress: bool,
    recompute_stale: bool,
) -> stages.CellsOutcome:
    return stages.run_cells(config, paths, executor, progress, recompute_stale)


@task(name="aggregate", cache_policy=NO_CACHE)
def aggregate(
    config: crl_config.Config, paths: RunPaths, cell_files: list[Path]
) -> tuple[int, int]:
    prov = runtime.provenance(config.hash(), config.run_id(), config.inputs)
    roots = [p.root for p in stages.pretrainings(config, paths)]
    return aggregate_step.aggregate_run(config, paths, cell_files, prov, roots)


@task(name="report", cache_policy=NO_CACHE)
def render(paths: RunPaths) -> str:
    """The report, rebuilt only when the tables changed since it was last built."""
    return str(report.build_if_changed(paths.tables, paths.report, paths.staging)[0])


@flow(name="bound_grid", log_prints=True)
def bound_grid(
    config_path: str,
    overrides: list[str] | None = None,
    out: str = "runs",
    ray_address: str | None = None,
    progress: bool = True,
    executor: str = "ray",
    recompute_stale: bool = False,
    workdir: str | None = None,
) -> dict:
    """Run (or resume) the (m, n) grid of a config; returns a summary of what happened.

    `config_path` and `out` are read against this process's working directory (a deployment's
    worker runs in the repository), the path fields of the config and its overrides against
    `workdir` (default: the same), the folder a deployment was made from (crl.core.places)."""
    overrides = overrides or []
    config, paths = prepare_run(  # the code override check before anything imports the module
        config_path,
        overrides,
        resolved(out),
        workdir,
        is_local(ray_address),
        guard=lambda config: deploy.check_code_overrides(config, overrides),
    )
    clock = _StageClock()
    runner = make_executor(executor, ray_address)
    runner.start()
    runner.check_cpus(config.runtime.cell_cpus)
    for section, p in config.pretrainings().items():  # 1 CPU per worker
        runner.check_cpus(p.workers, f"{section}.workers")
    clock.lap("start")
    materialize(config, paths, runner)
    clock.lap("materialize")
    if config.pretrainings():
        pretrain(config, paths, runner, progress)
        clock.lap("pretrain")
    embed(config, paths, runner, progress)
    clock.lap("embed")
    outcome = cells(config, paths, runner, progress, recompute_stale)
    clock.lap("cells")
    checked = held = 0
    page = ""
    if outcome.files:  # when every cell failed there is nothing to aggregate
        checked, held = aggregate(config, paths, outcome.files)
        clock.lap("aggregate")
        page = render(paths)
        clock.lap("report")
    result = asdict(
        GridResult(
            str(paths.root),
            outcome.total,
            outcome.skipped,
            outcome.computed,
            outcome.failures,
            checked,
            held,
            page,
            runner.where(),
            clock.seconds,
        )
    )
    flow_run = artifacts.current_flow_run()
    if page:
        artifacts.publish_grid(paths.root, page, checked, held, result, flow_run)
    catalogue.record_flow_run(
        paths.root, flow_run.flow_run_id, flow_run.deployment_id, flow_run.deployment, paths.staging
    )
    paths.clean_staging()
    return result


@task(name="instances", cache_policy=NO_CACHE)
def run_instances(
    config: crl_config.CheckConfig, paths: CheckPaths, executor: Executor, progress: bool
) -> tuple[int, int]:
    return stages.run_check_units(config, paths, executor, progress)


@task(name="aggregate", cache_policy=NO_CACHE)
def aggregate_checks(config: crl_config.CheckConfig, paths: CheckPaths) -> list[dict]:
    prov = runtime.provenance(config.hash(), config.run_id())
    out = check_tables.write_check_tables(paths.units, paths.tables, paths.staging, prov)
    return out["checks_summary"].drop(list(prov)).to_dicts()


@task(name="report", cache_policy=NO_CACHE)
def render_checks(paths: CheckPaths) -> str:
    return str(check_report.build_checks(paths.tables, paths.report, paths.staging))


@flow(name="theorem_checks", log_prints=True)
def theorem_checks(
    config_path: str | None = None,
    out: str = "runs",
    instances: int | None = None,
    ray_address: str | None = None,
    progress: bool = True,
    overrides: list[str] | None = None,
    executor: str = "ray",
) -> dict:
    """Run (or resume) the statement checks; returns the per-statement summary and failures."""
    config, paths = prepare_check_run(config_path, overrides or [], instances, resolved(out))
    runner = make_executor(executor, ray_address)
    runner.start()
    units, computed = run_instances(config, paths, runner, progress)
    summary = aggregate_checks(config, paths)
    page = render_checks(paths)
    paths.clean_staging()
    artifacts.publish_checks(paths.root, summary, page)
    return asdict(CheckResult(str(paths.root), units, computed, summary, page, runner.where()))
