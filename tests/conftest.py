"""Shared fixtures: run the real `crl` command (real Ray, real Prefect, real files)."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests import services

REPO = Path(__file__).resolve().parent.parent
# a cell's timing columns; the summary's start with them (wall_seconds_mean, ...)
TIMING = ("wall_seconds", "bounds_seconds", "ladder_seconds")
# the input-fingerprint cache (crl.core.fingerprints) of the tests and the commands they start:
# made once by the process that starts the session (xdist's workers inherit it) and removed when
# that process ends; a CRL_CACHE_DIR the user set is theirs and stays
if "CRL_CACHE_DIR" not in os.environ:
    os.environ["CRL_CACHE_DIR"] = tempfile.mkdtemp(prefix="crl-test-cache-")
    atexit.register(shutil.rmtree, os.environ["CRL_CACHE_DIR"], ignore_errors=True)


def crl(
    *args: str,
    cwd: Path | None = None,
    timeout: int = 600,
    env: dict[str, str] | None = None,
    prefect: str = "session",
) -> subprocess.CompletedProcess:
    """Run the crl CLI in a fresh process, as a user would.

    `prefect`: "session" points the command at the test session's Prefect server (started on
    first use; a user's PREFECT_API_URL works the same way); "temporary" lets it start Prefect's
    temporary server of its own, as `crl run` does on a laptop.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    if prefect == "session":
        env["PREFECT_API_URL"] = services.session_prefect().api
    elif prefect == "temporary":
        env.pop("PREFECT_API_URL", None)
    else:
        raise ValueError(f"prefect={prefect!r}: expected 'session' or 'temporary'")
    return subprocess.run(
        [sys.executable, "-m", "crl", *args],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def crl_killable(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start the crl CLI in a session of its own (against the test session's Prefect server),
    output discarded, so that `os.killpg(proc.pid, SIGKILL)` kills it and every process it
    started, as a kill -9 of the run would."""
    return subprocess.Popen(
        [sys.executable, "-m", "crl", *args],
        cwd=REPO,
        env={**os.environ, **(env or {}), "PREFECT_API_URL": services.session_prefect().api},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    services.stop_session_prefect()
