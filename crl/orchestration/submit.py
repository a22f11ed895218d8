"""`crl run` as a Ray job on a cluster, through the job API on the head's dashboard port.

Every check raises DeployError, one line naming the argument, before anything is created on the
cluster.
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

import yaml

from crl.core import config as crl_config
from crl.core import places
from crl.core.errors import ConfigError, DeployError
from crl.orchestration import runtime
from crl.steps import families, store

REPO = runtime.REPO

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


@dataclass(frozen=True)
class Submitted:
    submission_id: str
    address: str


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


def shipped_config(path: str) -> str:
    """The config file's text for the job: as it is, or, when it names a relative data path
    (crl.core.places.PATH_FIELDS), as YAML with that path made absolute."""
    text = Path(path).read_text()
    tree = yaml.safe_load(text)
    absolute = places.resolved_fields(tree)
    return text if absolute == tree else yaml.safe_dump(absolute, sort_keys=False)


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

    `out` is a path on the cluster, on storage every node mounts, or an object store every node
    reaches (s3://bucket/prefix: crl.steps.store): cells are written by the node that computes
    them and aggregated by the driver.
    """
    address = _check_address(address)
    if not store.is_uri(out) and not Path(out).is_absolute():
        raise DeployError(
            f"--out {out}: give an absolute path on the cluster, on storage every node mounts "
            "(e.g. /data/crl/runs), or an object store (s3://bucket/runs)"
        )
    try:
        cfg = crl_config.load(config, overrides)
    except ConfigError as err:
        raise DeployError(str(err)) from None
    # the job reads the config on the cluster, in a working directory of its own: the data
    # paths it names are made absolute here, where the user typed them (crl.core.places)
    entrypoint = job_entrypoint(out, places.resolved_overrides(overrides))
    plugins = os.environ.get(families.PLUGINS_VARIABLE)  # the job's driver asks the registry
    env = {**({families.PLUGINS_VARIABLE: plugins} if plugins else {}), **(env or {})}
    runtime_env = job_runtime_env(shipped_config(config), env, pip or [])
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

    try:
        asyncio.run(tail())
        info = client.get_job_info(submission_id)
        while not info.status.is_terminal():  # the log stream can close before the status
            time.sleep(1)
            info = client.get_job_info(submission_id)
    except (ConnectionError, RuntimeError) as err:  # the head (its job API) is gone
        raise DeployError(
            f"lost the job API at {address} while following {submission_id} "
            f"({_one_line(err)}); if the head died, the job died with it: finished units are "
            "kept under --out, and the same `crl submit` (or `crl run`) resumes the run"
        ) from None
    if info.status == JobStatus.SUCCEEDED:
        return 0
    return info.driver_exit_code or 1


def job_status(address: str, submission_id: str) -> tuple[str, str | None]:
    info = _client(address).get_job_info(submission_id)
    return str(info.status.value), info.message
