"""Real services for the tests, started by the tests: processes in their own process groups, a
free loopback port, and the one Prefect server of a test session.

Every `crl` command of a test session talks to one Prefect server (`prefect server start` on
127.0.0.1, a database of its own in a temporary folder), started on first use and stopped when
the session ends. Prefect's temporary server costs 7-20 s per command; the tests of the temporary
server itself (its clean-up after kill -9 and Ctrl-C, its home folder) ask for their own.
With pytest-xdist each worker process has its own server.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(
    what: str, check: Callable[[], bool], timeout: float, proc: subprocess.Popen | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited with {proc.returncode}")
        time.sleep(0.2)
    raise AssertionError(f"{what}: not ready after {timeout:.0f} s")


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """A service in its own process group, so that teardown reaches its children too."""
    with log.open("ab") as sink:
        return subprocess.Popen(
            args, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(*procs: subprocess.Popen, sig: int = signal.SIGTERM, grace: float = 15) -> None:
    """Signal each process group, wait for them together, then kill what is left."""
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)


class PrefectServer:
    """`prefect server start` on a free loopback port with a home folder of its own."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="crl-test-prefect-"))
        self.api = f"http://127.0.0.1:{free_port()}/api"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")},
            "PREFECT_HOME": str(self.folder / "home"),
            "PREFECT_API_URL": self.api,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_LOGGING_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
        self.log = self.folder / "server.log"
        port = self.api.rsplit(":", 1)[1].split("/")[0]
        self.process = start(
            [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", port],
            self.env,
            self.log,
        )
        try:
            wait_for("prefect server", self.healthy, 180, self.process)
        except AssertionError:
            self.stop()
            raise

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.api}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        stop(self.process, sig=signal.SIGINT)
        shutil.rmtree(self.folder, ignore_errors=True)


_SESSION: list[PrefectServer] = []


def session_prefect() -> PrefectServer:
    """The Prefect server of this test session (of this xdist worker), started on first use."""
    if not _SESSION:
        _SESSION.append(PrefectServer())
    return _SESSION[0]


def stop_session_prefect() -> None:
    while _SESSION:
        _SESSION.pop().stop()


def kill_marked(marker: str) -> None:
    """Kill processes of this user whose command line names `marker` (a private temp dir)."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if proc.stat().st_uid != os.getuid() or int(proc.name) == os.getpid():
                continue
            if marker in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace"
            ):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


@contextlib.contextmanager
def two_node_ray_cluster(head_cpus: int = 1) -> Iterator[dict]:
    """A head (`head_cpus` CPUs) and a worker node (1 CPU) on 127.0.0.1, token auth, temp
    folders head/ and worker/ under `temp`; `add_worker(name)` starts another 1-CPU worker node
    (temp folder `name`/), as an autoscaler replaces a lost node. All stopped and removed on
    exit."""
    temp = Path(tempfile.mkdtemp(prefix="crlray", dir="/tmp"))  # short: Ray's socket paths
    token = secrets.token_hex(16)
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    env.pop("RAY_ADDRESS", None)
    # set by crl for a private local Ray (crl.orchestration.runtime) when a test of this worker
    # process started one in-process; with it, `ray start` refuses a second node
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    gcs, dashboard = free_port(), free_port()
    common = [
        "--block",
        "--node-ip-address",
        "127.0.0.1",
        "--object-store-memory",
        str(200 * 1024 * 1024),
        "--disable-usage-stats",
    ]
    nodes = []

    def add_worker(name: str) -> None:
        worker = [
            str(BIN / "ray"),
            "start",
            "--address",
            f"127.0.0.1:{gcs}",
            "--dashboard-agent-listen-port",
            str(free_port()),
            "--temp-dir",
            str(temp / name),
            "--num-cpus",
            "1",
            *common,
        ]
        nodes.append(_start_ray_node(worker, env, temp / name, f"ray worker node {name}"))

    try:
        head = [
            str(BIN / "ray"),
            "start",
            "--head",
            "--port",
            str(gcs),
            "--dashboard-host",
            "127.0.0.1",
            "--dashboard-port",
            str(dashboard),
            "--ray-client-server-port",
            str(free_port()),
            "--dashboard-agent-listen-port",
            str(free_port()),
            "--temp-dir",
            str(temp / "head"),
            "--num-cpus",
            str(head_cpus),
            *common,
        ]
        nodes.append(_start_ray_node(head, env, temp / "head", "ray head"))
        add_worker("worker")
        yield {
            "env": env,
            "address": f"http://127.0.0.1:{dashboard}",
            "token": token,
            "temp": temp,
            "add_worker": add_worker,
        }
    finally:
        stop(*nodes, grace=5)  # `ray start --block` outlives SIGTERM; its children do not
        kill_marked(str(temp))
        shutil.rmtree(temp, ignore_errors=True)


def _start_ray_node(
    args: list[str], env: dict[str, str], folder: Path, what: str
) -> subprocess.Popen:
    """`ray start --block` of one node, whose temp folder is `folder`; started once more when
    the node missed Ray's fixed 30 s registration deadline (a loaded machine)."""
    for attempt in (1, 2):
        log = folder.parent / f"{folder.name}-{attempt}.log"
        proc = start(args, env, log)
        try:
            started = lambda log=log: "Ray runtime started" in log.read_text()  # noqa: E731
            wait_for(what, started, 120, proc)
            return proc
        except AssertionError:
            text = log.read_text()
            stop(proc, grace=5)
            kill_marked(str(folder))
            if attempt == 2 or "timed out during startup" not in text:
                raise AssertionError(
                    f"{what} did not start; its log ends:\n{text[-2000:]}"
                ) from None
    raise AssertionError(f"{what} did not start")


def alive_nodes(cluster: dict) -> int:
    reply = httpx.get(
        f"{cluster['address']}/nodes?view=summary",
        headers={"Authorization": f"Bearer {cluster['token']}"},
        timeout=10,
    )
    reply.raise_for_status()
    summary = reply.json()["data"]["summary"]
    return sum(1 for node in summary if node["raylet"]["state"] == "ALIVE")


@contextlib.contextmanager
def s3_server(folder: Path) -> Iterator[dict[str, str]]:
    """An S3-compatible server (moto's server mode) on 127.0.0.1 with one bucket, `crl`; yields
    the environment that reaches it the standard way (AWS_ENDPOINT_URL and credentials)."""
    import pyarrow.fs as pafs

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = start(
        [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        dict(os.environ),
        folder / "moto.log",
    )
    try:
        wait_for("the S3 server", lambda: _answers(endpoint), 60, proc)
        pafs.S3FileSystem(endpoint_override=endpoint, allow_bucket_creation=True).create_dir("crl")
        yield {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    finally:
        stop(proc)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code < 500
    except httpx.HTTPError:
        return False
