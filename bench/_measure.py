"""What the kernel benchmarks share: child processes under an address-space limit, the growth of
peak RSS during one call, out-of-memory reports, and the text table.

Peak memory is the growth of VmHWM (Linux peak RSS of the process, reset to the current RSS
through /proc/self/clear_refs) during one call; a child measuring it runs with
MALLOC_MMAP_THRESHOLD_=65536 (`child(..., low_mmap=True)`) so that freed blocks leave the RSS.
torch's CPU allocator is invisible to tracemalloc, and ru_maxrss cannot be reset.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable

REFERENCE_ADDRESS_LIMIT = 10 * 2**30  # bytes of address space for one benchmark child


def limit_address_space() -> None:
    """Cap this process at REFERENCE_ADDRESS_LIMIT, so a variant that does not fit fails with
    an out-of-memory error instead of swapping."""
    resource.setrlimit(resource.RLIMIT_AS, (REFERENCE_ADDRESS_LIMIT, REFERENCE_ADDRESS_LIMIT))


def proc_status_kib(field: str) -> int:
    """A `kB` field of /proc/self/status (Linux), e.g. VmRSS or VmHWM (peak RSS of this process)."""
    with open("/proc/self/status") as status:
        line = next(row for row in status if row.startswith(field + ":"))
    return int(line.split()[1])


def peak_growth_mib(call: Callable[[], object]) -> float:
    """MiB by which the peak RSS rises above the current RSS while `call()` runs."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # VmHWM := VmRSS
    before = proc_status_kib("VmRSS")
    call()
    return (proc_status_kib("VmHWM") - before) / 1024


def interleaved_times(
    steps: dict[str, Callable[[], object]], min_rounds: int, max_rounds: int, seconds: float
) -> tuple[dict[str, list[float]], int]:
    """Seconds of every call of each step, the steps interleaved round by round (a busy machine
    slows them alike), their order reversed every other round (no step always runs first or
    after the same other). Rounds: at least `min_rounds`, then until `seconds` have passed or
    `max_rounds` are done. Returns the times and the number of rounds."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    order = list(steps.items())
    rounds, start_all = 0, time.perf_counter()
    while rounds < min_rounds or (
        rounds < max_rounds and time.perf_counter() - start_all < seconds
    ):
        for name, step in order if rounds % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
        rounds += 1
    return times, rounds


def out_of_memory(err: BaseException) -> dict:
    """{"error": ...} naming the allocation that failed (torch states its size in bytes)."""
    wanted = re.search(r"allocate (\d+) bytes", str(err))
    size = f"{int(wanted.group(1)) / 2**30:.1f} GiB" if wanted else str(err)[:80]
    return {"error": f"out of memory allocating {size}"}


def child(script: str, *args: str, low_mmap: bool = False) -> dict:
    """Run `script --child args` in a fresh interpreter and parse the JSON line it prints; a
    child that dies gives {"error": ...}."""
    env = os.environ | ({"MALLOC_MMAP_THRESHOLD_": "65536"} if low_mmap else {})
    out = subprocess.run(
        [sys.executable, script, "--child", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if out.returncode != 0:
        return {"error": f"exit {out.returncode}: {out.stderr.strip().splitlines()[-1:]}"}
    return json.loads(out.stdout)


def table(rows: list[dict]) -> str:
    """Aligned text table; a new header whenever the set of columns changes."""
    groups: list[list[dict[str, str]]] = []
    for row in rows:
        cells = {k: f"{v:.4g}" if isinstance(v, float) else str(v) for k, v in row.items()}
        if not groups or list(groups[-1][0]) != list(cells):
            groups.append([])
        groups[-1].append(cells)
    lines = []
    for group in groups:
        widths = {k: max(len(k), *(len(c[k]) for c in group)) for k in group[0]}
        lines += ["", "  ".join(k.ljust(w) for k, w in widths.items())]
        lines += ["  ".join(c[k].ljust(w) for k, w in widths.items()) for c in group]
    return "\n".join(lines)
