"""Start or connect Ray, set up Prefect's local mode, and read provenance (version, git commit)."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import crl
from crl.core.provenance import PROVENANCE_COLUMNS

REPO = Path(__file__).resolve().parents[2]  # the checkout: crl/orchestration/runtime.py


def prefect_local_env(home: Path | None = None) -> None:
    """Prefect in local mode: a temporary server on 127.0.0.1 with a persistent, git-ignored home.

    A persistent PREFECT_HOME keeps the SQLite database between runs, so the temporary server
    skips its migrations the second time (about 20 s -> 7 s here). Analytics and telemetry are
    off: the analytics heartbeat is what locks SQLite ("database is locked").
    """
    if os.environ.get("PREFECT_API_URL"):
        return
    home = home or Path(os.environ.get("CRL_PREFECT_HOME", REPO / ".prefect"))
    home.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PREFECT_HOME", str(home))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")


def ray_init(address: str | None = None, num_cpus: int | None = None) -> str:
    """Connect to `address` (or RAY_ADDRESS), else start a private local Ray on 127.0.0.1.

    A bare ray.init() silently attaches to any running cluster; address="local" never does.
    Returns a short description of where the work runs.
    """
    address = address or os.environ.get("RAY_ADDRESS")
    local = not address or address == "local"
    if local and "RAY_AUTH_MODE" not in os.environ:
        # Ray 2.60's token auth, with a fresh token per process and no token file on disk:
        # other local users cannot reach this private Ray even on 127.0.0.1. Ray reads these
        # variables when it is imported, so they are set first.
        os.environ["RAY_AUTH_MODE"] = "token"
        if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
            os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if ray.is_initialized():
        return "ray (already connected)"
    quiet = {"logging_level": "ERROR", "log_to_driver": False}
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    runtime_env = {"env_vars": {"PYTHONPATH": pythonpath}}
    if not local:
        ray.init(address=address, runtime_env=runtime_env, **quiet)
        return f"ray cluster at {address}"
    ray.init(
        address="local",
        num_cpus=num_cpus or os.cpu_count(),
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        object_store_memory=_object_store_bytes(),
        runtime_env=runtime_env,
        **quiet,
    )
    return "local ray on 127.0.0.1"


def _object_store_bytes() -> int:
    return int(os.environ.get("CRL_OBJECT_STORE_MB", "2048")) * 1024 * 1024


def git_commit() -> str:
    """The commit of the checkout, '-dirty' when tracked files differ; 'unknown' outside git.

    CRL_GIT_COMMIT wins when set: a cluster job or container has no .git (crl submit and the
    Dockerfile set it from the submitting checkout).
    """
    if os.environ.get("CRL_GIT_COMMIT"):
        return os.environ["CRL_GIT_COMMIT"]
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance(config_hash: str, run_id: str) -> dict[str, str]:
    """The columns every output table carries, in the order of PROVENANCE_COLUMNS."""
    values = (run_id, config_hash, crl.__version__, git_commit())
    return dict(zip(PROVENANCE_COLUMNS, values, strict=True))
