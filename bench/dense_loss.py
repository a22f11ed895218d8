"""Benchmark of crl.kernels.dense.dense_info_nce against the naive MoCo-style reference
(a script, not a test).

Setting: DenseCL's (Wang et al. 2021): B images, a 7 x 7 grid (K = 49 positions per view),
C = 128, a queue of Q = 65536 rows, T = 0.2, one positive per position (pairs (b, k, k)), float32
on the CPU. The reference materialises all (B K) x (B K + Q) logits at once and calls
F.cross_entropy; crl runs with its defaults (path "auto"). Both see the same tensors (same seed)
and do one forward + backward, each in a fresh child process, after a warm-up call on B = 2.

Time: wall time of that one call. Peak memory: the growth of VmHWM (Linux peak resident set
of the child, reset to the current RSS through /proc/self/clear_refs after the warm-up) during
the call; the child runs with MALLOC_MMAP_THRESHOLD_=65536 so that freed blocks leave the RSS.
torch's CPU allocator is invisible to tracemalloc, and ru_maxrss cannot be reset. The column
logits_mib is the exact size of the largest logit block each variant holds.

Run: `.venv/bin/python bench/dense_loss.py` (about a minute on 2 busy cores);
`--sweep` adds B = 1, 2, 4, 8, 16 for crl's two paths forced (where DIRECT_MAX_LOGITS comes
from).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from crl.kernels.dense import DIRECT_MAX_LOGITS, dense_info_nce

SIDE, DIM, QUEUE, TEMPERATURE = 7, 128, 65536, 0.2
CASES = (8, 64)
SWEEP = (1, 2, 4, 8, 16)


def _inputs(batch: int) -> tuple[torch.Tensor, ...]:
    """Unit features v1, v2 (B, K, C), queue (Q, C), pairs (B K, 3) rows (b, k, k)."""
    gen = torch.Generator().manual_seed(0)
    k = SIDE * SIDE
    v1 = F.normalize(torch.randn(batch, k, DIM, generator=gen), dim=-1).requires_grad_()
    v2 = F.normalize(torch.randn(batch, k, DIM, generator=gen), dim=-1).requires_grad_()
    queue = F.normalize(torch.randn(QUEUE, DIM, generator=gen), dim=-1)
    pos = torch.arange(k).repeat(batch)
    pairs = torch.stack([torch.arange(batch).repeat_interleave(k), pos, pos], dim=1)
    return v1, v2, queue, pairs


def _naive(v1: torch.Tensor, v2: torch.Tensor, queue: torch.Tensor, pairs: torch.Tensor):
    """All logits at once: (B K) x (B K + Q), then cross-entropy against the positive column."""
    B, K, C = v1.shape
    a = v1.reshape(B * K, C)
    logits = torch.cat([a @ v2.reshape(-1, C).T, a @ queue.T], dim=1) / TEMPERATURE
    rows = pairs[:, 0] * K + pairs[:, 1]
    return F.cross_entropy(logits[rows], pairs[:, 0] * K + pairs[:, 2])


def _step(variant: str, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    v1, v2, queue, pairs = inputs
    v1.grad = v2.grad = None
    if variant == "naive":
        loss = _naive(v1, v2, queue, pairs)
    else:
        path = "auto" if variant == "crl" else variant
        loss = dense_info_nce(v1, v2, pairs, TEMPERATURE, queue=queue, path=path)
    loss.backward()
    return loss.detach()


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        return int(next(r for r in status if r.startswith(field + ":")).split()[1])


def _child(variant: str, batch: int) -> dict:
    _step(variant, _inputs(2))  # warm-up: libraries, thread pools
    inputs = _inputs(batch)
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # VmHWM := VmRSS
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    value = _step(variant, inputs)
    seconds = time.perf_counter() - start
    grads = torch.cat([inputs[0].grad.flatten(), inputs[1].grad.flatten()]).double()
    return {
        "seconds": seconds,
        "peak_mib": (_status_kib("VmHWM") - before) / 1024,
        "loss": float(value),
        "grad_norm": float(grads.norm()),
        "grad_sum": float(grads.sum()),
    }


def _run_child(variant: str, batch: int) -> dict:
    env = os.environ | {"MALLOC_MMAP_THRESHOLD_": "65536"}
    out = subprocess.run(
        [sys.executable, __file__, "--child", variant, str(batch)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if out.returncode != 0:
        raise RuntimeError(f"child {variant} B={batch} failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout)


def _logits_mib(variant: str, batch: int) -> float:
    """The largest logit block: all of them (naive, direct) or one chunk of 1024 pairs."""
    k = SIDE * SIDE
    pairs, columns = batch * k, batch * k + QUEUE
    direct = pairs * columns <= DIRECT_MAX_LOGITS
    rows = pairs if variant in ("naive", "direct") or (variant == "crl" and direct) else 1024
    return min(rows, pairs) * columns * 4 / 2**20


def main(sweep: bool) -> None:
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32 CPU; "
        f"K = {SIDE}x{SIDE}, C = {DIM}, Q = {QUEUE}, T = {TEMPERATURE}"
    )
    header = f"{'B':>3} {'variant':>8} {'seconds':>8} {'peak MiB':>9} {'logits MiB':>10} "
    print(header + f"{'time/naive':>10} {'mem/naive':>9} {'|dloss|':>8} {'dgrad':>8}")
    runs = [(b, v) for b in CASES for v in ("naive", "crl")]
    if sweep:
        runs += [(b, v) for b in SWEEP for v in ("naive", "direct", "chunked")]
    naive: dict[int, dict] = {}
    for batch, variant in runs:
        res = _run_child(variant, batch)
        if variant == "naive":
            naive[batch] = res
        ref = naive[batch]
        print(
            f"{batch:>3} {variant:>8} {res['seconds']:>8.3f} {res['peak_mib']:>9.0f} "
            f"{_logits_mib(variant, batch):>10.0f} {res['seconds'] / ref['seconds']:>10.2f} "
            f"{res['peak_mib'] / max(ref['peak_mib'], 1e-9):>9.2f} "
            f"{abs(res['loss'] - ref['loss']):>8.1e} "
            f"{abs(res['grad_norm'] - ref['grad_norm']) / ref['grad_norm']:>8.1e}",
            flush=True,
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(_child(sys.argv[2], int(sys.argv[3]))))
    else:
        main("--sweep" in sys.argv)
