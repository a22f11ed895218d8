"""The private local Ray listens on the loopback interface only, every process of it, and keeps
its session folders in a private temporary folder that is gone after the run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

PROBE = r"""
import json, os, socket, stat, sys, time
from crl.orchestration import runtime
runtime.ray_init(num_cpus=2)
import ray

@ray.remote
def plus(x):
    return x + 1

@ray.remote
class Pid:
    def pid(self):
        return os.getpid()

assert ray.get([plus.remote(i) for i in range(4)]) == [1, 2, 3, 4]
actor = Pid.remote()
ray.get(actor.pid.remote())
time.sleep(6)  # agents and metrics servers start after the first tasks
session = ray._private.worker._global_node.get_session_dir_path()
temp = os.path.dirname(os.path.dirname(session))  # <private>/r/session_*

def tree(root):
    kids, frontier = {root}, [root]
    parents = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
                parents.setdefault(parent, []).append(int(pid))
            except OSError:
                pass
    while frontier:
        for child in parents.get(frontier.pop(), []):
            if child not in kids:
                kids.add(child)
                frontier.append(child)
    for pid in os.listdir("/proc"):  # daemons reparented away but started for this session
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if session.encode() in f.read():
                        kids.add(int(pid))
            except OSError:
                pass
    return kids

inodes = {}
for pid in tree(os.getpid()):
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes[int(target[8:-1])] = pid
    except OSError:
        pass

def v4(h):
    return socket.inet_ntop(socket.AF_INET, bytes.fromhex(h)[::-1])

def v6(h):
    b = bytes.fromhex(h)
    return socket.inet_ntop(socket.AF_INET6, b"".join(b[i:i + 4][::-1] for i in range(0, 16, 4)))

listeners = []
for path, conv in (("/proc/net/tcp", v4), ("/proc/net/tcp6", v6)):
    for line in open(path).read().splitlines()[1:]:
        parts = line.split()
        if parts[3] == "0A" and int(parts[9]) in inodes:
            host, port = parts[1].split(":")
            listeners.append([conv(host), int(port, 16), inodes[int(parts[9])]])
mode = stat.S_IMODE(os.stat(temp).st_mode)
print(json.dumps({"listeners": listeners, "temp": temp, "mode": mode}))
"""

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def test_local_ray_listens_on_loopback_only_and_cleans_its_temp_dir() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    listeners = report["listeners"]
    assert len(listeners) >= 6, listeners  # GCS, raylet, workers, agents: really looked
    outside = [entry for entry in listeners if entry[0] not in LOOPBACK]
    assert not outside, f"listening beyond loopback: {outside}"
    assert report["mode"] == 0o700 and "crl-ray-" in report["temp"]
    from pathlib import Path

    assert not Path(report["temp"]).exists()  # removed at exit
