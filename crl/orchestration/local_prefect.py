"""Prefect's local mode: crl's commands run their flows against a Prefect API on 127.0.0.1 that
they start themselves, unless PREFECT_API_URL names a server (then nothing is started).

The server is Prefect's own application (`prefect.server.api.server:create_app`, the factory of
`prefect server start`) in the configuration Prefect gives its temporary server (no UI, no
background services), served by uvicorn in a process of its own. crl starts it rather than
letting Prefect's client do so at the first API call because it can then start it first: the
server's imports and database take about 4.5 s, which now overlap crl's own imports and checks on
another core instead of following them (and Prefect's client, given PREFECT_API_URL, no longer
imports the server's code in the crl process). At exit crl stops it; after a kill -9 the
watchdog (crl.orchestration.watchdog) does.

Its home, PREFECT_HOME, is persistent (`prefect_home()`): the SQLite database is migrated once,
not at every start.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from crl.core.errors import ConfigError

STARTUP_SECONDS = 120.0  # PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS overrides it


def prefect_home() -> Path:
    """CRL_PREFECT_HOME, else the user's cache ($XDG_CACHE_HOME or ~/.cache)/crl/prefect: a
    writable place even when crl's code is read-only (a container, a system-wide install)."""
    if os.environ.get("CRL_PREFECT_HOME"):
        return Path(os.environ["CRL_PREFECT_HOME"])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "crl" / "prefect"


def prefect_local_env(home: Path | None = None) -> None:
    """Prefect in local mode: its home and quiet settings, in this process's environment.

    A persistent PREFECT_HOME keeps the SQLite database between runs, so the server skips its
    migrations the second time (about 20 s -> 5 s here). Analytics and telemetry are off: the
    analytics heartbeat is what locks SQLite ("database is locked").
    """
    if os.environ.get("PREFECT_API_URL"):
        return
    home = home or prefect_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"Prefect home {home}: cannot create it ({err.strerror}); set CRL_PREFECT_HOME to a "
            "writable folder"
        ) from None
    os.environ.setdefault("PREFECT_HOME", str(home))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # run logs (crl's progress lines) reach the API and the UI; the console shows warnings only
    os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL", "INFO")
    os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL", "INFO")
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")


def start_server() -> Callable[[], None]:
    """Start the local server now and point PREFECT_API_URL at it; returns the call that waits
    until it answers (call it before anything talks to Prefect). Nothing is started when
    PREFECT_API_URL is set. Call `prefect_local_env()` first: the server inherits its home."""
    if os.environ.get("PREFECT_API_URL"):
        return lambda: None
    server = _LocalServer()
    atexit.register(server.stop)
    return server.wait


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _LocalServer:
    """One uvicorn process serving Prefect's API on a free loopback port; its output goes to a
    log in PREFECT_HOME, removed when it stops, and quoted if it fails to start."""

    ATTEMPTS = 3  # a free port can be taken between choosing it and binding it

    def __init__(self) -> None:
        home = Path(os.environ.get("PREFECT_HOME") or tempfile.gettempdir())
        self.log_path = home / f"crl-server-{os.getpid()}.log"
        self.attempts = 0
        self._spawn()

    def _spawn(self) -> None:
        self.attempts += 1
        self.port = _free_port()
        self.api = f"http://127.0.0.1:{self.port}/api"
        os.environ["PREFECT_API_URL"] = self.api
        env = {
            **os.environ,
            "PREFECT_UI_ENABLED": "0",
            "PREFECT__SERVER_EPHEMERAL": "1",  # Prefect's temporary-server configuration
            "PREFECT__SERVER_FINAL": "1",
        }
        env.pop("PREFECT_API_URL")
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "--factory",
                    "prefect.server.api.server:create_app",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--log-level",
                    "error",
                    "--lifespan",
                    "on",
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.api}/health", timeout=2) as reply:
                return reply.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait(self) -> None:
        timeout = float(
            os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", STARTUP_SECONDS)
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._answers():
                return
            if self.process.poll() is not None:
                if self.attempts < self.ATTEMPTS and "address already in use" in self._tail():
                    self._spawn()
                    continue
                break
            time.sleep(0.05)
        code = self.process.poll()
        raise ConfigError(
            f"Prefect's local server (PREFECT_HOME={os.environ.get('PREFECT_HOME')}) did not "
            f"answer on {self.api} within {timeout:.0f} s"
            + (f" (it exited with {code}: {self._tail()})" if code is not None else "")
        )

    def _tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1] if lines else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log_path.unlink(missing_ok=True)
