"""Benchmark of crl.losses.nt_xent and crl.dense.dense_info_nce (a script, not a test).

1. NT-Xent forward + backward, float32 CPU, crl vs pytorch-metric-learning `NTXentLoss` on the
   same L2-normalised tensors: median time over repeats after a warm-up, speed ratio, max |diff|.
   Each pml run happens in a child process under an address-space limit, because pml builds a
   (2B) x (2B (2B - 2)) indicator matrix and cannot run at large B.
2. Dense InfoNCE with a 16384-row queue: chunked `dense_info_nce` vs a naive unchunked version
   (one logit matrix for all positions), forward + backward, each variant in fresh child
   processes: one for time, one for memory. Peak memory is the growth of VmHWM (Linux peak RSS of
   the process, reset through /proc/self/clear_refs after a warm-up) during one call; ru_maxrss
   would not do, since it survives exec and a child starts with the parent's peak.

Run: `.venv/bin/python bench/kernels_losses.py`.
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from crl.dense import dense_info_nce
from crl.losses import nt_xent

NTXENT_BATCHES = (64, 256, 1024, 4096)
NTXENT_DIM, NTXENT_T = 128, 0.1
PML_ADDRESS_LIMIT = 8 * 2**30  # bytes of address space for one pml child
DENSE_CASES = ((8, 7, 128, 16384), (64, 7, 128, 16384))  # (B, grid side, C, Q)
DENSE_T, DENSE_CHUNK = 0.2, 128


def _median_seconds(step: Callable[[], torch.Tensor], repeats: int) -> tuple[float, float]:
    """Median wall time of `step` (forward + backward) after one warm-up; also its value."""
    value = step().item()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times), value


def _ntxent_inputs(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(batch)
    z1 = F.normalize(torch.randn(batch, NTXENT_DIM, generator=gen), dim=1)
    z2 = F.normalize(z1 + 0.5 * torch.randn(batch, NTXENT_DIM, generator=gen), dim=1)
    return z1.requires_grad_(), z2.requires_grad_()


def _ntxent_step(impl: str, z1: torch.Tensor, z2: torch.Tensor) -> Callable[[], torch.Tensor]:
    labels = torch.arange(z1.shape[0]).repeat(2)  # (2B,) pml: view i and i + B share a label
    if impl == "pml":
        from pytorch_metric_learning.losses import NTXentLoss

        pml = NTXentLoss(temperature=NTXENT_T)

    def step() -> torch.Tensor:
        z1.grad = z2.grad = None
        loss = nt_xent(z1, z2, NTXENT_T) if impl == "crl" else pml(torch.cat([z1, z2]), labels)
        loss.backward()
        return loss.detach()

    return step


def _naive_dense(
    v1: torch.Tensor, v2: torch.Tensor, pairs: torch.Tensor, temperature: float, queue: torch.Tensor
) -> torch.Tensor:
    """Unchunked Dense InfoNCE: one (B*K1) x (B*K2 + Q) logit matrix, MoCo style.

    Pairs are (b, k, k), one positive per position, so every mean level is a plain mean.
    """
    B, K1, C = v1.shape
    a = v1.reshape(B * K1, C)  # (B*K1, C)
    logits = torch.cat([a @ v2.reshape(-1, C).T, a @ queue.T], dim=1) / temperature
    rows = pairs[:, 0] * K1 + pairs[:, 1]  # (P,)
    target = pairs[:, 0] * v2.shape[1] + pairs[:, 2]  # (P,)
    return F.cross_entropy(logits[rows], target)  # logits: (B*K1, B*K2 + Q)


def _dense_inputs(batch: int, side: int, dim: int, qsize: int) -> tuple[torch.Tensor, ...]:
    """Random unit features v1, v2 (B, K, C), queue (Q, C), identity pairs (B*K, 3)."""
    gen = torch.Generator().manual_seed(0)
    k = side * side
    v1 = F.normalize(torch.randn(batch, k, dim, generator=gen), dim=-1).requires_grad_()
    v2 = F.normalize(torch.randn(batch, k, dim, generator=gen), dim=-1).requires_grad_()
    queue = F.normalize(torch.randn(qsize, dim, generator=gen), dim=-1)
    pos = torch.arange(k).repeat(batch)  # (B*K,) position k of view 1 <-> position k of view 2
    pairs = torch.stack([torch.arange(batch).repeat_interleave(k), pos, pos], dim=1)  # (B*K, 3)
    return v1, v2, queue, pairs


def _dense_step(
    variant: str, v1: torch.Tensor, v2: torch.Tensor, queue: torch.Tensor, pairs: torch.Tensor
) -> torch.Tensor:
    """Forward + backward of one variant; returns the detached loss."""
    v1.grad = v2.grad = None
    if variant == "naive":
        loss = _naive_dense(v1, v2, pairs, DENSE_T, queue)
    else:
        loss = dense_info_nce(v1, v2, pairs, DENSE_T, queue=queue, chunk=DENSE_CHUNK)
    loss.backward()
    return loss.detach()


def _proc_status_kib(field: str) -> int:
    """A `kB` field of /proc/self/status (Linux), e.g. VmRSS or VmHWM (peak RSS of this process)."""
    with open("/proc/self/status") as status:
        line = next(row for row in status if row.startswith(field + ":"))
    return int(line.split()[1])


def _dense_child(mode: str, variant: str, batch: int, side: int, dim: int, qsize: int) -> dict:
    """One dense variant forward + backward in a fresh process.

    mode "time": median of 5 runs after one warm-up run. mode "mem": warm up on B=2, reset the
    peak-RSS mark, run once; peak_mib is the growth of resident memory during that run (the
    parent starts this child with a low malloc mmap threshold so freed blocks leave the RSS).
    """
    if mode == "time":
        inputs = _dense_inputs(batch, side, dim, qsize)
        seconds, value = _median_seconds(lambda: _dense_step(variant, *inputs), 5)
        return {"value": value, "seconds": seconds}
    _dense_step(variant, *_dense_inputs(2, side, dim, qsize))
    inputs = _dense_inputs(batch, side, dim, qsize)
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # VmHWM := VmRSS
    before = _proc_status_kib("VmRSS")
    value = _dense_step(variant, *inputs).item()
    return {"value": value, "peak_mib": (_proc_status_kib("VmHWM") - before) / 1024}


def _pml_child(batch: int, repeats: int) -> dict:
    resource.setrlimit(resource.RLIMIT_AS, (PML_ADDRESS_LIMIT, PML_ADDRESS_LIMIT))
    z1, z2 = _ntxent_inputs(batch)
    try:
        seconds, value = _median_seconds(_ntxent_step("pml", z1, z2), repeats)
    except (RuntimeError, MemoryError) as err:
        wanted = re.search(r"allocate (\d+) bytes", str(err))
        size = f"{int(wanted.group(1)) / 2**30:.0f} GiB" if wanted else str(err)[:80]
        return {"error": f"{type(err).__name__} allocating {size}"}
    return {"seconds": seconds, "value": value}


def _child(*args: str, low_mmap: bool = False) -> dict:
    """Run `--child args` in a fresh interpreter and parse its JSON line."""
    env = os.environ | ({"MALLOC_MMAP_THRESHOLD_": "65536"} if low_mmap else {})
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if out.returncode != 0:
        return {"error": f"exit {out.returncode}: {out.stderr.strip().splitlines()[-1:]}"}
    return json.loads(out.stdout)


def run() -> list[dict]:
    """All benchmark rows; NT-Xent rows first, then dense rows."""
    rows = []
    for batch in NTXENT_BATCHES:
        repeats = 5 if batch <= 1024 else 3
        seconds, value = _median_seconds(_ntxent_step("crl", *_ntxent_inputs(batch)), repeats)
        pml = _child("pml", str(batch), str(repeats))
        row = {"bench": "nt_xent", "B": batch, "D": NTXENT_DIM, "crl_s": seconds}
        if "error" in pml:
            row |= {
                "pml_s": math.nan,
                "speedup": math.nan,
                "max_abs_diff": math.nan,
                "note": "pml failed: " + pml["error"],
            }
        else:
            row |= {
                "pml_s": pml["seconds"],
                "speedup": pml["seconds"] / seconds,
                "max_abs_diff": abs(pml["value"] - value),
                "note": "",
            }
        rows.append(row)
    for batch, side, dim, qsize in DENSE_CASES:
        case = [str(x) for x in (batch, side, dim, qsize)]
        naive, chunked = (
            _child("time", v, *case) | _child("mem", v, *case, low_mmap=True)
            for v in ("naive", "chunked")
        )
        pairs, columns = batch * side * side, batch * side * side + qsize
        for name, res in (("naive", naive), ("chunked", chunked)):
            rows_at_once = min(DENSE_CHUNK, pairs) if name == "chunked" else pairs
            row = {
                "bench": f"dense_{name}",
                "B": batch,
                "K": side * side,
                "C": dim,
                "Q": qsize,
                "chunk": rows_at_once,
                "logits_mib": rows_at_once * columns * 4 / 2**20,  # largest float32 intermediate
            }
            row |= res
            row["abs_diff_vs_naive"] = abs(
                res.get("value", math.nan) - naive.get("value", math.nan)
            )
            rows.append(row)
    return rows


def _table(rows: list[dict]) -> str:
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


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        if sys.argv[2] == "pml":
            result = _pml_child(*(int(x) for x in sys.argv[3:]))
        else:
            mode, variant, *nums = sys.argv[2:]
            result = _dense_child(mode, variant, *(int(x) for x in nums))
        print(json.dumps(result))
    else:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32 CPU")
        print(_table(run()))
