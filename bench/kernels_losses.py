"""Benchmark of crl.losses.nt_xent (a script, not a test).

NT-Xent forward + backward, float32 CPU, D = 128, T = 0.1: crl's `nt_xent` (path "auto")
against the plain-torch formulation users write (normalise, one 2B x 2B similarity matrix,
masked diagonal, `F.cross_entropy`) and pytorch-metric-learning's `NTXentLoss`, on the same
tensors. Every variant runs in fresh child processes under one address-space limit
(REFERENCE_ADDRESS_LIMIT in bench/_measure.py, so a variant that does not fit fails instead of
swapping): one for time (crl and the plain reference in one process, their repeats interleaved,
the order reversed every other round; the median after a warm-up), one per variant for peak
memory. The loss values and the
gradients with respect to z1, z2 are compared with the reference's (max |diff|); where the
reference does not fit, the value is compared with a float64 one computed row block by row block.

Peak memory: the growth of VmHWM (Linux peak RSS of the child, reset through
/proc/self/clear_refs after a warm-up on B = 2) during one call, the child running with
MALLOC_MMAP_THRESHOLD_=65536 so freed blocks leave the RSS. Dense InfoNCE: bench/dense_loss.py.

Run: `.venv/bin/python bench/kernels_losses.py` (about 3 minutes on 2 cores);
`--batches 8,64` runs only those batch sizes.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import tempfile
from collections.abc import Callable

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

from crl.losses import nt_xent

NTXENT_BATCHES = (32, 64, 256, 1024, 4096, 16384)
NTXENT_DIM, NTXENT_T = 128, 0.1
NTXENT_IMPLS = ("plain", "crl", "pml")


def _ntxent_inputs(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(batch)
    z1 = F.normalize(torch.randn(batch, NTXENT_DIM, generator=gen), dim=1)
    z2 = F.normalize(z1 + 0.5 * torch.randn(batch, NTXENT_DIM, generator=gen), dim=1)
    return z1.requires_grad_(), z2.requires_grad_()


def plain_nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """The plain-torch NT-Xent: normalise, one (2B, 2B) similarity matrix, diagonal masked,
    cross-entropy against each row's partner."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    sim = (z @ z.T).div_(temperature)
    sim.fill_diagonal_(-math.inf)
    partner = (torch.arange(z.shape[0]) + z1.shape[0]) % z.shape[0]
    return F.cross_entropy(sim, partner)


def _ntxent_step(impl: str, z1: torch.Tensor, z2: torch.Tensor) -> Callable[[], torch.Tensor]:
    labels = torch.arange(z1.shape[0]).repeat(2)  # (2B,) pml: view i and i + B share a label
    if impl == "pml":
        from pytorch_metric_learning.losses import NTXentLoss

        pml = NTXentLoss(temperature=NTXENT_T)
    loss_of = {
        "crl": lambda: nt_xent(z1, z2, NTXENT_T),
        "plain": lambda: plain_nt_xent(z1, z2, NTXENT_T),
        "pml": lambda: pml(torch.cat([z1, z2]), labels),
    }[impl]

    def step() -> torch.Tensor:
        z1.grad = z2.grad = None
        loss = loss_of()
        loss.backward()
        return loss.detach()

    return step


def _time_child(impls: list[str], batch: int, repeats: int, grads: str) -> dict:
    """The variants `impls` in one fresh process under REFERENCE_ADDRESS_LIMIT, on the same
    tensors, their repeats interleaved (so a busy machine slows them alike): the median time
    after a warm-up, the value, the gradients saved to `grads`.<impl>.pt. A variant that runs
    out of memory is reported as such and the others go on."""
    limit_address_space()
    z1, z2 = _ntxent_inputs(batch)
    steps, out = {}, {}
    for impl in impls:
        try:
            steps[impl] = _ntxent_step(impl, z1, z2)
            out[impl] = {"value": steps[impl]().item()}
            torch.save({"z1": z1.grad, "z2": z2.grad}, f"{grads}.{impl}.pt")
        except (RuntimeError, MemoryError) as err:
            steps.pop(impl, None)
            out[impl] = out_of_memory(err)
    times, _ = interleaved_times(steps, repeats, repeats, 0.0)
    for impl in steps:
        out[impl]["seconds"] = statistics.median(times[impl])
    return out


def _memory_child(impl: str, batch: int) -> dict:
    """One variant in a fresh process: the growth of peak RSS during one call (after a warm-up
    on B = 2)."""
    limit_address_space()
    try:
        _ntxent_step(impl, *_ntxent_inputs(2))()
        return {"peak_mib": peak_growth_mib(_ntxent_step(impl, *_ntxent_inputs(batch)))}
    except (RuntimeError, MemoryError) as err:
        return out_of_memory(err)


def _float64_value(batch: int, rows: int = 512) -> float:
    """NT-Xent of the benchmark's inputs in float64, `rows` anchors at a time (value only)."""
    z1, z2 = (z.detach().double() for z in _ntxent_inputs(batch))
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n, total = z.shape[0], 0.0
    for start in range(0, n, rows):
        idx = torch.arange(start, min(n, start + rows))
        sim = z[idx] @ z.T / NTXENT_T  # (rows, 2B)
        pos = sim[torch.arange(idx.numel()), (idx + batch) % n]
        sim[torch.arange(idx.numel()), idx] = -math.inf
        total += float((torch.logsumexp(sim, dim=1) - pos).sum())
    return total / n


def _ntxent_row(batch: int) -> dict:
    """Time, peak memory, value and gradient differences of every NT-Xent variant at B."""
    repeats = 100 if batch <= 256 else 10 if batch <= 1024 else 3 if batch <= 4096 else 1
    row: dict = {"bench": "nt_xent", "B": batch, "D": NTXENT_DIM}
    with tempfile.TemporaryDirectory() as tmp:
        grads = os.path.join(tmp, "grads")
        found: dict[str, dict] = {}
        for impls, times in (("crl,plain", repeats), ("pml", min(repeats, 3))):  # pml: s a call
            timed = child(__file__, "time", impls, str(batch), str(times), grads)
            for impl in impls.split(","):  # a child that died reports for all its variants
                found[impl] = timed.get(impl, timed) if "error" not in timed else dict(timed)
        for impl, res in found.items():
            memory = (
                {} if impl == "pml" else child(__file__, "mem", impl, str(batch), low_mmap=True)
            )
            res["peak_mib"] = memory.get("peak_mib", math.nan)
            if "error" not in res:
                res["grads"] = torch.load(f"{grads}.{impl}.pt")
        ref = found["plain"]
        for impl, res in found.items():
            row[f"{impl}_ms"] = res.get("seconds", math.nan) * 1e3
            if impl != "pml":
                row[f"{impl}_peak_mib"] = res["peak_mib"]  # NaN where it did not fit
        crl = found["crl"]
        row["crl_speedup_vs_plain"] = ref.get("seconds", math.nan) / crl.get("seconds", math.nan)
        row["crl_speedup_vs_pml"] = found["pml"].get("seconds", math.nan) / crl.get(
            "seconds", math.nan
        )
        if "grads" in ref and "grads" in crl:
            row["value_diff"] = abs(crl["value"] - ref["value"])
            row["grad_diff"] = max(
                float((crl["grads"][k] - ref["grads"][k]).abs().max()) for k in ("z1", "z2")
            )
        elif "value" in crl:  # the reference did not fit: an independent float64 value instead
            row["value_diff"] = abs(crl["value"] - _float64_value(batch))
            row["grad_diff"] = math.nan
        row["pml_value_diff"] = abs(
            found["pml"].get("value", math.nan) - ref.get("value", math.nan)
        )
        row["note"] = "; ".join(f"{k}: {v['error']}" for k, v in found.items() if "error" in v)
    return row


def run(batches: tuple[int, ...] = NTXENT_BATCHES) -> list[dict]:
    """One row per batch size."""
    return [_ntxent_row(batch) for batch in batches]


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        if sys.argv[2] == "time":
            impls, batch, repeats, grads = sys.argv[3:]
            result = _time_child(impls.split(","), int(batch), int(repeats), grads)
        else:
            result = _memory_child(sys.argv[3], int(sys.argv[4]))
        print(json.dumps(result))
    else:
        batches = NTXENT_BATCHES
        if len(sys.argv) == 3 and sys.argv[1] == "--batches":
            batches = tuple(int(b) for b in sys.argv[2].split(","))
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32 CPU")
        print(table(run(batches)))
