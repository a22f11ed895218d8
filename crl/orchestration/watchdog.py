"""A watchdog that stops what a crl process started when that process dies without cleaning up
(kill -9): Prefect's temporary server and the private Ray would otherwise outlive it.

`start(pid)` launches `python -m crl.orchestration.watchdog PID` in its own session. Every
second it records the descendants of PID (pid and start time, so a reused pid is never hit);
once PID is gone it sends SIGTERM to each recorded process still alive, then SIGKILL to those
left after a grace period, removes the private Ray's folders ($TMPDIR/crl-ray-PID-*) and exits.
Linux only (/proc); elsewhere it does nothing.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

GRACE_SECONDS = 5.0


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[1]), fields[19]


def descendants(root: int) -> dict[int, str]:
    """pid -> start time of every live descendant of `root`."""
    children: dict[int, list[int]] = {}
    started: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := _stat(int(entry))) is not None:
            children.setdefault(info[0], []).append(int(entry))
            started[int(entry)] = info[1]
    found, frontier = {}, [root]
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in found:
                found[child] = started[child]
                frontier.append(child)
    return found


def signal_all(recorded: dict[int, str], sig: int) -> int:
    """Send `sig` to every recorded process that is still the same process; how many."""
    hit = 0
    for pid, start in recorded.items():
        info = _stat(pid)
        if info is not None and info[1] == start:
            try:
                os.kill(pid, sig)
                hit += 1
            except OSError:
                pass
    return hit


def alive(recorded: dict[int, str]) -> bool:
    """Whether any recorded process is still the same live process."""
    return any((info := _stat(p)) is not None and info[1] == s for p, s in recorded.items())


def watch(parent: int, period: float = 1.0) -> None:
    """Follow `parent`'s descendants until it dies, then stop them."""
    recorded: dict[int, str] = {}
    me = os.getpid()
    while _stat(parent) is not None:
        recorded.update({p: s for p, s in descendants(parent).items() if p != me})
        time.sleep(period)
    if signal_all(recorded, signal.SIGTERM):
        deadline = time.monotonic() + GRACE_SECONDS
        while time.monotonic() < deadline and alive(recorded):
            time.sleep(0.2)
        signal_all(recorded, signal.SIGKILL)
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), f"crl-ray-{parent}-*")):
        shutil.rmtree(folder, ignore_errors=True)  # the private Ray's folders (runtime.ray_init)


def start(parent: int | None = None) -> None:
    """Launch the watchdog of `parent` (this process by default) in its own session."""
    if not os.path.isdir("/proc"):
        return
    subprocess.Popen(
        [sys.executable, "-m", "crl.orchestration.watchdog", str(parent or os.getpid())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


if __name__ == "__main__":
    watch(int(sys.argv[1]))
