"""Benchmark of crl.kernels.dense.info_nce.dense_info_nce against the naive MoCo-style reference
(a script, not a test).

Setting: DenseCL's (Wang et al. 2021): B images, a 7 x 7 grid (K = 49 positions per view),
C = 128, a queue of Q = 65536 rows, T = 0.2, one positive per position (pairs (b, k, k)), float32
on the CPU. The reference materialises all (B K) x (B K + Q) logits at once and calls
F.cross_entropy; crl runs with its defaults (path "auto"; `--sweep` adds its two paths forced,
where DIRECT_MAX_LOGITS comes from). Every variant sees the same tensors (same seed) and does
one forward + backward.

Time: per batch size, one child process under the address-space limit of bench/_measure.py runs
every variant: a warm-up call each (its loss and gradients give the differences), then repeats
interleaved (a busy machine slows all alike; the order reversed every other round) for about
REPEAT_SECONDS (MIN_REPEATS to MAX_REPEATS each); the median. time/naive is that median over
the naive one's.
Peak memory: one child per variant (MALLOC_MMAP_THRESHOLD_=65536), warmed up on B = 2, then the
growth of peak RSS during one call (bench/_measure.py). logits_mib is the exact size of the
largest logit block each variant holds.

Run: `.venv/bin/python bench/dense_loss.py` (about 2 minutes on 2 cores);
`--batches 8,64` picks the batch sizes, `--seconds S` the time spent on repeats, `--json`
prints one JSON object a row.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from functools import partial

import torch
import torch.nn.functional as F
from _measure import (
    child,
    interleaved_times,
    limit_address_space,
    out_of_memory,
    peak_growth_mib,
    table,
)

from crl.kernels.dense.info_nce import DIRECT_MAX_LOGITS, dense_info_nce

SIDE, DIM, QUEUE, TEMPERATURE = 7, 128, 65536, 0.2
BATCHES = (8, 64)
SWEEP = (1, 2, 4, 8, 16)
REPEAT_SECONDS = 20.0  # timed repeats per batch size, all variants: about this long,
MIN_REPEATS, MAX_REPEATS = 3, 30  # and at least / at most this many


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
    """One forward + backward of `variant`; the gradients are left on v1 and v2."""
    v1, v2, queue, pairs = inputs
    v1.grad = v2.grad = None
    if variant == "naive":
        loss = _naive(v1, v2, queue, pairs)
    else:
        path = "auto" if variant == "crl" else variant
        loss = dense_info_nce(v1, v2, pairs, TEMPERATURE, queue=queue, path=path)
    loss.backward()
    return loss.detach()


def _time_child(batch: int, variants: list[str], seconds: float) -> dict:
    """Per variant: the median time of interleaved repeats after a warm-up, and the differences
    of its loss and gradients from the naive one's (variants[0])."""
    limit_address_space()
    inputs = _inputs(batch)
    out: dict[str, dict] = {}
    first = {}
    for variant in variants:
        try:
            value = _step(variant, inputs)
            first[variant] = (float(value), torch.cat([inputs[0].grad, inputs[1].grad]))
            out[variant] = {}
        except (RuntimeError, MemoryError) as err:
            out[variant] = out_of_memory(err)
    ref = first.get(variants[0])
    for variant, (value, grad) in first.items():
        if ref is not None:
            out[variant]["loss_diff"] = abs(value - ref[0])
            out[variant]["grad_diff"] = float((grad - ref[1]).abs().max())
    first.clear()
    steps = {v: partial(_step, v, inputs) for v in variants if "error" not in out[v]}
    times, rounds = interleaved_times(steps, MIN_REPEATS, MAX_REPEATS, seconds)
    for variant, spent in times.items():
        out[variant] |= {"seconds": statistics.median(spent), "repeats": rounds}
    return out


def _memory_child(batch: int, variant: str) -> dict:
    """The growth of peak RSS during one call of `variant`, after a warm-up on B = 2."""
    limit_address_space()
    _step(variant, _inputs(2))
    inputs = _inputs(batch)
    try:
        return {"peak_mib": peak_growth_mib(lambda: _step(variant, inputs))}
    except (RuntimeError, MemoryError) as err:
        return out_of_memory(err)


def _logits_mib(variant: str, batch: int) -> float:
    """The largest logit block: all of them (naive, direct) or one chunk of 1024 pairs."""
    k = SIDE * SIDE
    pairs, columns = batch * k, batch * k + QUEUE
    direct = pairs * columns <= DIRECT_MAX_LOGITS
    rows = pairs if variant in ("naive", "direct") or (variant == "crl" and direct) else 1024
    return min(rows, pairs) * columns * 4 / 2**20


def _rows(batch: int, variants: list[str], seconds: float) -> list[dict]:
    """One row per variant at `batch`: median time, its ratio to naive, memory, differences."""
    timed = child(__file__, "time", str(batch), ",".join(variants), str(seconds))
    rows = []
    for variant in variants:
        res = dict(timed.get(variant, {"error": timed.get("error", "no result")}))
        res |= child(__file__, "mem", str(batch), variant, "0", low_mmap=True)
        rows.append(
            {
                "B": batch,
                "variant": variant,
                "seconds": res.get("seconds", math.nan),
                "repeats": res.get("repeats", 0),
                "peak_mib": res.get("peak_mib", math.nan),
                "logits_mib": _logits_mib(variant, batch),
                "loss_diff": res.get("loss_diff", math.nan),
                "grad_diff": res.get("grad_diff", math.nan),
                "note": res.get("error", ""),
            }
        )
    naive = rows[0]
    for row in rows:
        row["time/naive"] = row["seconds"] / naive["seconds"]
        row["mem/naive"] = row["peak_mib"] / max(naive["peak_mib"], 1e-9)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--batches",
        type=lambda s: tuple(int(t) for t in s.split(",")),
        default=BATCHES,
        help="batch sizes B, e.g. 8,64 (default: %(default)s)",
    )
    parser.add_argument("--sweep", action="store_true", help=f"also B in {SWEEP}, paths forced")
    parser.add_argument(
        "--seconds",
        type=float,
        default=REPEAT_SECONDS,
        help="timed repeats per batch size for about this long (default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object a row, no table")
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32 CPU; "
        f"K = {SIDE}x{SIDE}, C = {DIM}, Q = {QUEUE}, T = {TEMPERATURE}",
        flush=True,
    )
    rows = []
    for batch in args.batches:
        print(f"dense_loss: B = {batch}", file=sys.stderr, flush=True)
        rows += _rows(batch, ["naive", "crl"], args.seconds)
    for batch in SWEEP if args.sweep else ():
        print(f"dense_loss: B = {batch}, paths forced", file=sys.stderr, flush=True)
        rows += _rows(batch, ["naive", "direct", "chunked"], args.seconds)
    print("\n".join(json.dumps(row) for row in rows) if args.json else table(rows))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, batch, variants, seconds = sys.argv[2:]
        if kind == "time":
            print(json.dumps(_time_child(int(batch), variants.split(","), float(seconds))))
        else:
            print(json.dumps(_memory_child(int(batch), variants)))
    else:
        main()
