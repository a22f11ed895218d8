"""Run crl where users run it: scheduled Prefect deployments and Ray job submission.

- `deploy`: a deployment of `bound_grid` or `theorem_checks` on a Prefect server, run by a
  process work pool's worker; the code is this checkout (a `set_working_directory` pull step).
- `serve`: the same deployment served by this process (no work pool, no worker).
- `submit`: `crl run` as a Ray job on a cluster, through the job API on the head's dashboard port.

The CLI (crl/cli_deploy.py) parses arguments; every check here raises DeployError, one line
naming the argument, before anything is created on a server or a cluster.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crl import config as crl_config
from crl import runtime

REPO = runtime.REPO

FLOW_ENTRYPOINTS = {
    "bound_grid": "flows/bound_grid.py:bound_grid",
    "theorem_checks": "flows/theorem_checks.py:theorem_checks",
}

# Left out of the job's working_dir upload (Ray also honours .gitignore); anchored at the repo root.
WORKING_DIR_EXCLUDES = [
    "/runs/",
    "/.venv/",
    "/.prefect/",
    "/.git/",
    "/.hypothesis/",
    "/.pytest_cache/",
    "/.ruff_cache/",
    "/build/",
    "*.egg-info/",
    "__pycache__/",
]


class DeployError(ValueError):
    """Input that cannot be deployed or submitted; the message is one line naming the argument."""


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


@dataclass(frozen=True)
class Submitted:
    submission_id: str
    address: str


def portable_path(path: str | Path) -> str:
    """Relative to the repo when inside it (the flow runs with the repo as working directory),
    absolute otherwise."""
    resolved = Path(path).expanduser().resolve()
    try:
        return str(resolved.relative_to(REPO))
    except ValueError:
        return str(resolved)


def flow_parameters(
    flow: str,
    config: str | None,
    overrides: list[str],
    out: str,
    ray_address: str | None,
    instances: int | None,
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
            crl_config.load(config, overrides)
        except crl_config.ConfigError as err:
            raise DeployError(str(err)) from None
        return {
            "config_path": portable_path(config),
            "overrides": list(overrides),
            "out": portable_path(out),
            "ray_address": ray_address,
            "progress": False,
        }
    if instances is not None and instances < 1:
        raise DeployError(f"--instances: must be at least 1 (got {instances})")
    extra = [f"instances={instances}"] if instances else []
    try:
        crl_config.load_checks(config, [*overrides, *extra])
    except crl_config.ConfigError as err:
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
        tags=["crl"],
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
        tags=["crl"],
        version=runtime.git_commit(),
        limit=limit,
    )


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise DeployError(f"--env {pair!r}: expected KEY=VALUE")
        env[key.strip()] = value
    return env


def job_entrypoint(out: str, overrides: list[str]) -> str:
    """The shell command the job runs on the cluster: the config travels in $CRL_CONFIG_YAML
    (so a config outside the repo works too) and `crl run` attaches to the cluster's Ray."""
    run = [
        "python",
        "-m",
        "crl",
        "run",
        '"$f"',
        "--out",
        shlex.quote(out),
        "--ray-address",
        "auto",
    ]
    for override in overrides:
        run += ["--set", shlex.quote(override)]
    return (
        'f=$(mktemp "${TMPDIR:-/tmp}/crl-config-XXXXXX") && '
        'printf "%s" "$CRL_CONFIG_YAML" > "$f" && '
        f'{" ".join(run)}; rc=$?; rm -f "$f"; exit $rc'
    )


def job_runtime_env(config_text: str, env: dict[str, str], pip: list[str]) -> dict[str, Any]:
    runtime_env: dict[str, Any] = {
        "working_dir": str(REPO),
        "excludes": WORKING_DIR_EXCLUDES,
        "env_vars": {
            "CRL_CONFIG_YAML": config_text,
            "CRL_GIT_COMMIT": runtime.git_commit(),
            "PYTHONUNBUFFERED": "1",
            **env,
        },
    }
    if pip:
        runtime_env["pip"] = list(pip)
    return runtime_env


def _check_address(address: str) -> str:
    if not address.startswith(("http://", "https://")):
        raise DeployError(
            f"--address {address}: expected the job API on the head's dashboard port, "
            "e.g. http://HEAD:8265"
        )
    return address.rstrip("/")


def _one_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def _client(address: str) -> Any:
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except AuthenticationError:
        raise DeployError(
            f"--address {address}: the cluster wants its token; set RAY_AUTH_MODE=token and "
            "RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token)"
        ) from None
    except (ConnectionError, RuntimeError) as err:
        raise DeployError(f"--address {address}: {_one_line(err)}") from None


def submit(
    config: str,
    overrides: list[str],
    address: str,
    out: str,
    env: dict[str, str] | None = None,
    pip: list[str] | None = None,
) -> Submitted:
    """Submit `crl run CONFIG` as a Ray job; the repo (less runs/, .venv/, ...) is its working_dir.

    `out` is a path on the cluster, on storage every node mounts: cells are written by the node
    that computes them and aggregated by the driver.
    """
    address = _check_address(address)
    if not Path(out).is_absolute():
        raise DeployError(
            f"--out {out}: give an absolute path on the cluster, on storage every node mounts "
            "(e.g. /data/crl/runs)"
        )
    try:
        cfg = crl_config.load(config, overrides)
    except crl_config.ConfigError as err:
        raise DeployError(str(err)) from None
    entrypoint = job_entrypoint(out, overrides)
    runtime_env = job_runtime_env(Path(config).read_text(), env or {}, pip or [])
    client = _client(address)
    submission_id = f"crl-{cfg.run_id()}-{secrets.token_hex(3)}"
    try:
        client.submit_job(
            entrypoint=entrypoint,
            submission_id=submission_id,
            runtime_env=runtime_env,
            metadata={"crl_run_id": cfg.run_id(), "crl_config": os.path.basename(config)},
        )
    except RuntimeError as err:
        raise DeployError(f"--address {address}: {_one_line(err)}") from None
    return Submitted(submission_id, address)


def follow(address: str, submission_id: str, echo: Callable[[str], None]) -> int:
    """Stream the job's logs until it ends; the exit code is the driver's (0 when it succeeded)."""
    from ray.job_submission import JobStatus

    client = _client(address)

    async def tail() -> None:
        async for chunk in client.tail_job_logs(submission_id):
            echo(chunk)

    asyncio.run(tail())
    info = client.get_job_info(submission_id)
    while not info.status.is_terminal():  # the log stream can close a moment before the status
        time.sleep(1)
        info = client.get_job_info(submission_id)
    if info.status == JobStatus.SUCCEEDED:
        return 0
    return info.driver_exit_code or 1


def job_status(address: str, submission_id: str) -> tuple[str, str | None]:
    info = _client(address).get_job_info(submission_id)
    return str(info.status.value), info.message
