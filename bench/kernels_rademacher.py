"""Benchmark of crl.rademacher.linear (a script, not a test).

Sign-suprema throughput for N = 1e5 rows, p = 128, d = 32, 64 draws, float32 features: useful
flops 2 * draws * d * N * p per second, divided by this machine's float32 matmul peak measured in
the same run (a 4096^3 torch.matmul). Target ratio >= 0.7. Two more rows show what bounds it:
the matmuls alone on ready-made signs (one (p, 4096) @ (4096, d * draws) per block of rows) and
the sign generation alone (hash + unpack, as the kernel runs it). The kernel runs them one after
the other on the same cores, so its time is about their sum. Timings are the best of several
interleaved rounds, so a busy machine hurts less.

Run: `.venv/bin/python bench/kernels_rademacher.py`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import torch

from crl import rademacher
from crl.kernels.rademacher import _signs

ROWS, P, D, DRAWS, SEED = 100_000, 128, 32, 64, 2024
PEAK_SIZE = 4096
ROUNDS = 7
TARGET = 0.7


def _best_seconds(steps: dict[str, Callable[[], object]], device: torch.device) -> dict[str, float]:
    """Best wall time of each step over ROUNDS interleaved rounds, after one warm-up each."""
    best = dict.fromkeys(steps, float("inf"))
    for round_ in range(ROUNDS + 1):
        for name, step in steps.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if round_:
                best[name] = min(best[name], time.perf_counter() - start)
    return best


def run(device: str | None = None) -> list[dict]:
    """One record per measurement; `ratio` is useful flops per second over the matmul peak."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    gen = torch.Generator(device=dev).manual_seed(SEED)
    a = torch.randn(PEAK_SIZE, PEAK_SIZE, generator=gen, device=dev)  # (n, n)
    b = torch.randn(PEAK_SIZE, PEAK_SIZE, generator=gen, device=dev)  # (n, n)
    features = torch.randn(ROWS, P, generator=gen, device=dev)  # (N, p) float32

    block_rows = rademacher.BLOCK_ROWS
    blocks = -(-ROWS // block_rows)
    signs = rademacher.signs(SEED, DRAWS, 0, block_rows, D, torch.float32, dev)  # (draws, rows, d)
    signs = signs.permute(1, 2, 0).contiguous().view(block_rows, D * DRAWS)  # (rows, d * draws)
    phi = features[:block_rows]  # (rows, p)
    out = torch.empty(P, D * DRAWS, device=dev)  # (p, d * draws)

    def gemm_only() -> None:
        for _ in range(blocks):
            torch.mm(phi.T, signs, out=out)

    sign_out = torch.empty(block_rows, D, DRAWS, device=dev)  # (rows, d, draws)
    table = _signs._sign_table(torch.float32, dev)

    def signs_only() -> None:  # the kernel's own hash + unpack, as LinearAccumulator runs them
        for block in range(blocks):
            words = _signs._words(SEED, 1, block * block_rows, block_rows, D, dev)
            _signs._unpack(words, table, sign_out)

    seconds = _best_seconds(
        {
            "matmul_peak": lambda: a @ b,
            "linear": lambda: rademacher.linear(features, D, 1.0, DRAWS, SEED),
            "gemm_only": gemm_only,
            "signs_only": signs_only,
        },
        dev,
    )
    peak = 2 * PEAK_SIZE**3 / seconds["matmul_peak"]
    useful = 2 * DRAWS * D * ROWS * P
    base = {
        "device": str(dev),
        "rows": ROWS,
        "p": P,
        "d": D,
        "draws": DRAWS,
        "threads": torch.get_num_threads(),
        "peak_gflops": peak / 1e9,
    }
    records = []
    for name in ("linear", "gemm_only", "signs_only"):
        flops = useful / seconds[name]
        records.append(
            base
            | {
                "kernel": name,
                "seconds": seconds[name],
                "gflops": flops / 1e9,
                "ratio": flops / peak,
                "target": TARGET if name == "linear" else None,
            }
        )
    return records


if __name__ == "__main__":
    for record in run():
        print(json.dumps(record))
