"""Scheduled Prefect deployments of crl's flows.

- `deploy`: a deployment of `bound_grid` or `theorem_checks` on a Prefect server, run by a
  process work pool's worker; the code is this checkout (a `set_working_directory` pull step).
- `serve`: the same deployment served by this process (no work pool, no worker).

The CLI (crl/cli/deploy.py) parses arguments; every check here raises DeployError, one line
naming the argument, before anything is created on a server.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crl.core import config as crl_config
from crl.core.errors import ConfigError, DeployError
from crl.orchestration import runtime
from crl.steps import store

REPO = runtime.REPO

# A deployment whose parameters may name the code its runs import (the dense backbone's module):
# set by `crl deploy --allow-module-overrides`, read from the deployment itself at run time.
MODULE_OVERRIDES_TAG = "crl:module-overrides"

FLOW_ENTRYPOINTS = {
    "bound_grid": "flows/bound_grid.py:bound_grid",
    "theorem_checks": "flows/theorem_checks.py:theorem_checks",
}


@dataclass(frozen=True)
class Schedule:
    cron: str
    timezone: str


@dataclass(frozen=True)
class Deployed:
    id: str
    full_name: str
    pool: str
    url: str | None


def portable_path(path: str | Path) -> str:
    """Relative to the repo when inside it (the flow runs with the repo as working directory),
    absolute otherwise; an object store's URI (crl.steps.store) as it is."""
    if store.is_uri(path):
        return str(path)
    resolved = Path(path).expanduser().resolve()
    try:
        return str(resolved.relative_to(REPO))
    except ValueError:
        return str(resolved)


def _refuse_code_overrides(named: list[str], where: str) -> None:
    raise ConfigError(
        f"{where} {', '.join(named)}: a deployment's parameters may not name the code a run "
        "imports (dense.backbone.module); name it in the config file on the worker, or deploy "
        "with --allow-module-overrides"
    )


def check_code_overrides(config: crl_config.Config, overrides: list[str]) -> None:
    """Refuse overrides that name the code a run imports (dense.backbone.module and its
    kwargs) when the flow runs for a deployment that did not opt in. Anyone who may start a
    deployment's run may set its parameters; only who deploys decides what code it runs.
    A flow run outside a deployment (`crl run`, `crl submit`) is its user's own command."""
    named = crl_config.overrides_naming_code(config, overrides)
    if not named:
        return
    from prefect.runtime import deployment

    deployment_id = deployment.id
    if deployment_id is None:
        return
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        tags = client.read_deployment(deployment_id).tags
    if MODULE_OVERRIDES_TAG not in tags:
        _refuse_code_overrides(named, "overrides")


def flow_parameters(
    flow: str,
    config: str | None,
    overrides: list[str],
    out: str,
    ray_address: str | None,
    instances: int | None,
    allow_module_overrides: bool = False,
) -> dict[str, Any]:
    """The deployment's default parameters, checked now rather than at the first scheduled run."""
    if flow not in FLOW_ENTRYPOINTS:
        raise DeployError(
            f"FLOW {flow!r}: unknown flow; expected one of {sorted(FLOW_ENTRYPOINTS)}"
        )
    if flow == "bound_grid":
        if instances is not None:
            raise DeployError("--instances: only theorem_checks takes it")
        if config is None:
            raise DeployError("--config: bound_grid needs a config, e.g. conf/quickstart.yaml")
        try:
            loaded = crl_config.load(config, overrides)
            named = crl_config.overrides_naming_code(loaded, overrides)
            if named and not allow_module_overrides:
                _refuse_code_overrides(named, "--set")
        except ConfigError as err:
            raise DeployError(str(err)) from None
        return {
            "config_path": portable_path(config),
            "overrides": list(overrides),
            "out": portable_path(out),
            "ray_address": ray_address,
            "progress": False,
            "workdir": portable_path(Path.cwd()),  # the config's relative data paths
        }
    try:
        crl_config.load_checks(config, crl_config.check_overrides(overrides, instances))
    except ConfigError as err:
        raise DeployError(str(err)) from None
    return {
        "config_path": None if config is None else portable_path(config),
        "out": portable_path(out),
        "instances": instances,
        "ray_address": ray_address,
        "progress": False,
        "overrides": list(overrides),
    }


def check_schedule(cron: str, timezone: str) -> Schedule:
    from prefect.client.schemas.schedules import CronSchedule
    from pydantic import ValidationError

    try:
        CronSchedule(cron=cron, timezone=timezone)
    except ValidationError as err:
        first = err.errors()[0]
        field = "--cron" if first["loc"][0] == "cron" else "--timezone"
        message = first["msg"].removeprefix("Value error, ")
        raise DeployError(f"{field}: {message}") from None
    return Schedule(cron, timezone)


def _api_url() -> str:
    """The Prefect server to register with (env or profile); never Prefect's temporary server."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise DeployError(
            "PREFECT_API_URL: not set; start a server (prefect server start --host 127.0.0.1) "
            "and export PREFECT_API_URL=http://127.0.0.1:4200/api"
        )
    return url


async def _check_api(url: str, pool: str | None) -> None:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    async with get_client() as client:
        failure = await client.api_healthcheck()
        if failure is not None:
            raise DeployError(
                f"PREFECT_API_URL {url}: cannot reach the Prefect API ({type(failure).__name__})"
            )
        if pool is None:
            return
        try:
            work_pool = await client.read_work_pool(pool)
        except ObjectNotFound:
            raise DeployError(
                f"--pool {pool}: no such work pool; create it: "
                f"prefect work-pool create {pool} --type process"
            ) from None
        if work_pool.type != "process":
            raise DeployError(
                f"--pool {pool}: a {work_pool.type!r} work pool; crl deploys to process pools"
            )


def _load_flow(flow: str) -> Any:
    """The flow, loaded from this checkout so that the deployment points at it."""
    from prefect import Flow

    entrypoint = FLOW_ENTRYPOINTS[flow]
    if not (REPO / entrypoint.split(":")[0]).is_file():
        raise DeployError(f"FLOW {flow}: {entrypoint.split(':')[0]} is not in this checkout")
    return Flow.from_source(source=str(REPO), entrypoint=entrypoint)


def _tags(allow_module_overrides: bool) -> list[str]:
    return ["crl", MODULE_OVERRIDES_TAG] if allow_module_overrides else ["crl"]


def _schedules(schedule: Schedule) -> list:
    from prefect.schedules import Cron

    return [Cron(schedule.cron, timezone=schedule.timezone)]


def deploy(
    flow: str,
    name: str,
    pool: str,
    schedule: Schedule,
    parameters: dict[str, Any],
    paused: bool = False,
    allow_module_overrides: bool = False,
) -> Deployed:
    """Create or update `FLOW/NAME` on the Prefect server, run by workers of the process pool."""
    url = _api_url()
    asyncio.run(_check_api(url, pool))
    loaded = _load_flow(flow)
    deployment_id = loaded.deploy(
        name=name,
        work_pool_name=pool,
        schedules=_schedules(schedule),
        parameters=parameters,
        paused=paused,
        tags=_tags(allow_module_overrides),
        version=runtime.git_commit(),
        build=False,
        push=False,
        print_next_steps=False,
    )
    from prefect.settings import PREFECT_UI_URL

    ui = PREFECT_UI_URL.value()
    link = f"{ui}/deployments/deployment/{deployment_id}" if ui else None
    return Deployed(str(deployment_id), f"{flow}/{name}", pool, link)


def serve(
    flow: str,
    name: str,
    schedule: Schedule,
    parameters: dict[str, Any],
    paused: bool = False,
    limit: int | None = None,
    allow_module_overrides: bool = False,
) -> None:
    """Create `FLOW/NAME` and run its flow runs from this process until interrupted.

    On exit Prefect pauses the deployment's schedule (pause_on_shutdown), so no runs pile up.
    """
    url = _api_url()
    asyncio.run(_check_api(url, None))
    loaded = _load_flow(flow)
    loaded.serve(
        name=name,
        schedules=_schedules(schedule),
        parameters=parameters,
        paused=paused,
        tags=_tags(allow_module_overrides),
        version=runtime.git_commit(),
        limit=limit,
    )
