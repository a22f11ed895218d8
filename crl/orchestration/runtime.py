"""Start or connect Ray, and read provenance (version, git commit). Prefect's local mode is
crl.orchestration.local_prefect."""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import crl
from crl.core.errors import ConfigError
from crl.core.provenance import PROVENANCE_COLUMNS
from crl.steps import store

REPO = Path(__file__).resolve().parents[2]  # the checkout: crl/orchestration/runtime.py


def is_local(address: str | None) -> bool:
    """Whether a run with this --ray-address (else RAY_ADDRESS) starts its own local Ray."""
    address = address or os.environ.get("RAY_ADDRESS")
    return not address or address == "local"


def check_address(address: str | None, timeout: float = 3.0) -> None:
    """Refuse a --ray-address that is malformed or where nothing listens, before any work.

    Accepted: auto, local, ray://HOST:PORT (Ray client) or HOST:PORT (a GCS)."""
    if address is None or address in ("auto", "local"):
        return
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"--ray-address {address}: expected auto, local, HOST:PORT or ray://HOST:PORT"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        raise ConfigError(
            f"--ray-address {address}: nothing answers there ({err.strerror or err})"
        ) from None


def local_cpus() -> int:
    """The CPUs a private local Ray offers: CRL_RAY_NUM_CPUS (a positive integer; e.g. to
    benchmark one core of many, or to leave cores to other work), else every CPU here."""
    value = os.environ.get("CRL_RAY_NUM_CPUS")
    if value is None:
        return os.cpu_count() or 1
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"CRL_RAY_NUM_CPUS={value!r}: expected a positive integer")
    return int(value)


def ray_environment(address: str | None = None) -> None:
    """The variables Ray reads when it is imported, set before anything imports it: token auth
    for a private local Ray, no usage stats, loopback binding. Idempotent."""
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
    if local:
        # Ray rewrites _node_ip_address="127.0.0.1" to the machine's address unless this is 0
        # (ray/_private/ray_constants.py, services.get_node_ip_address), and every component
        # binds loopback only when the node IP is loopback, a wildcard otherwise. Read at import.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


# what a worker needs to reach a run's object store (crl.steps.store): the mirrors, the cache,
# and the standard AWS variables, passed on only when set here
STORE_VARIABLES = (
    store.ENV,
    store.CACHE_ENV,
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_PROFILE",
)


def store_environment() -> dict[str, str]:
    """The variables of STORE_VARIABLES set in this process, for the workers' environment."""
    return {name: os.environ[name] for name in STORE_VARIABLES if os.environ.get(name)}


def ray_init(address: str | None = None, num_cpus: int | None = None) -> str:
    """Connect to `address` (or RAY_ADDRESS), else start a private local Ray on 127.0.0.1 with
    `num_cpus` CPUs (default: `local_cpus()`).

    A bare ray.init() silently attaches to any running cluster; address="local" never does.
    Returns a short description of where the work runs.
    """
    address = address or os.environ.get("RAY_ADDRESS")
    local = not address or address == "local"
    ray_environment(address)
    import ray

    if ray.is_initialized():
        return "ray (already connected)"
    quiet = {"logging_level": "ERROR", "log_to_driver": False}
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    runtime_env = {"env_vars": {"PYTHONPATH": pythonpath, **store_environment()}}
    if not local:
        ray.init(address=address, runtime_env=runtime_env, **quiet)
        _sigterm_interrupts()
        return f"ray cluster at {address}"
    for attempt in range(1, STARTS + 1):
        # Ray's folders live in r/ of a 0700 folder of this process, removed at exit (not in
        # the shared /tmp/ray): Ray makes its own folders world-writable, the parent keeps
        # others out
        temp = tempfile.mkdtemp(prefix=f"{PRIVATE_RAY_PREFIX}{os.getpid()}-")
        _PRIVATE_RAY.append(temp)
        atexit.register(_remove_private_ray, temp)
        try:
            ray.init(
                address="local",
                num_cpus=num_cpus or local_cpus(),
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                _temp_dir=os.path.join(temp, "r"),
                object_store_memory=_object_store_bytes(),
                runtime_env=runtime_env,
                **quiet,
            )
            break
        except Exception as err:  # Ray raises a bare Exception when its raylet is late
            if attempt == STARTS or STARTUP_TIMEOUT not in str(err):
                raise
            sys.stderr.write(
                "crl: the local Ray's node did not register within Ray's 30 s (a loaded "
                "machine?); starting it again\n"
            )
            stop_processes_naming(temp)
            _remove_private_ray(temp)
    _sigterm_interrupts()
    return f"local ray on 127.0.0.1 ({ray.cluster_resources().get('CPU', 0):g} CPUs)"


STARTS = 2  # tries to start the private Ray: a loaded machine can miss Ray's fixed 30 s once
STARTUP_TIMEOUT = "timed out during startup"  # Ray's message (ray._private.node)


def stop_processes_naming(marker: str) -> int:
    """Kill this process's descendants whose command line names `marker` (the folder of a
    private Ray whose start failed: its GCS and raylet outlive the failed ray.init). Returns
    how many were killed."""
    from crl.orchestration.watchdog import descendants

    killed = 0
    for pid in descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                named = marker in handle.read().replace(b"\0", b" ").decode(errors="replace")
            if named:
                os.kill(pid, signal.SIGKILL)
                killed += 1
        except OSError:
            continue
    return killed


def _sigterm_interrupts() -> None:
    """SIGTERM raises KeyboardInterrupt, as Ctrl-C does: ray.init installs a handler that exits
    the driver abruptly, so crl takes the signal back after it (main thread only)."""
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)


def forget_private_ray() -> None:
    """Remove the private Ray's folders without waiting for Ray, for an interrupted run that
    exits at once: its processes are stopped by the watchdog (crl.orchestration.watchdog)."""
    for temp in list(_PRIVATE_RAY):
        shutil.rmtree(temp, ignore_errors=True)


_PRIVATE_RAY: list[str] = []
PRIVATE_RAY_PREFIX = "crl-ray-"  # + the pid of the crl process, so its watchdog can find it


def _remove_private_ray(temp: str) -> None:
    """Stop the private Ray and remove its session folders."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)
    if temp in _PRIVATE_RAY:
        _PRIVATE_RAY.remove(temp)


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


def provenance(
    config_hash: str, run_id: str, inputs: dict[str, str] | None = None
) -> dict[str, str]:
    """The columns every output table carries, in the order of PROVENANCE_COLUMNS."""
    fingerprints = json.dumps(inputs or {}, sort_keys=True)
    values = (run_id, config_hash, crl.__version__, git_commit(), fingerprints)
    return dict(zip(PROVENANCE_COLUMNS, values, strict=True))
