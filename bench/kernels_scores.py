"""Benchmark of crl's score-based contrastive losses against plain torch (a script, not a test).

Kernels (crl.losses): InfoNCE (`info_nce`) and Li et al.'s LSE risk (`lse_risk`) on the
negative scores of own negatives (`scores_own`, fneg (n, m, d)) and of shared negatives
(`scores_shared`, fneg (m, d)); Saunshi et al.'s k-negative hinge and logistic losses
(`k_negative_margins` + `k_negative`, own negatives, k = m); InfoNCE and the LSE risk of shared
negatives from the features (`shared_negatives_loss(fx, fpos, fneg)`: row blocks at large
n m, the n x m scores never whole). The positive score is
(fx * fpos).sum(1), as in crl.kernels.learner. Each runs against the formulation a user writes
in plain torch, on the same tensors: negative scores `torch.bmm(fneg, fx[:, :, None])` (own) or
`fx @ fneg.T` (shared); InfoNCE `F.cross_entropy([pos, neg] / T, 0)`; LSE
`T (logsumexp((neg - pos) / T) - log m)` averaged; hinge `max(0, 1 + max_i (neg_i - pos))`;
logistic `log2(1 + sum_i exp(neg_i - pos))` (finite here: unit features, |scores| <= 1).

Setting: float32 CPU, d = 128, T = 0.1, unit-norm features, one forward + backward of the loss
averaged over anchors, with respect to fx, fpos and fneg, for each (n anchors, m negatives) in
SIZES, then the shared-negative kernels alone at SHARED_SIZES (CLIP-scale sets, where the plain
formulation's n x m buffers no longer fit).

Time: per size, one fresh child process under the address-space limit of bench/_measure.py
runs every kernel: crl and plain on the same tensors, the first call of each a warm-up, then
their repeats interleaved (a busy machine slows both alike; the order reversed every other
round) for about REPEAT_SECONDS (3 to 50 repeats each); the median. crl/plain is crl's median
over plain's (above 1: crl is slower). A/A control, up to AA_MAX_SCORES scores (where crl's
kernels run the plain formulation themselves and the two differ by microseconds): the plain
formulation is timed again as a third interleaved variant, and a/a is its median over plain's;
its distance from 1 is the resolution of crl/plain at that size.
Peak memory: per size, a second child (MALLOC_MMAP_THRESHOLD_=65536) warms every variant up on
tiny inputs, then measures the growth of peak RSS during one call of each variant, the input
gradients cleared before; it includes the gradients of the inputs (for own negatives n m d
floats). Diffs: |crl value - plain value| and the largest |difference| over the gradients of
fx, fpos and fneg, from the warm-up calls. Own negatives whose fneg and gradient exceed the
address-space limit are reported out of memory without being run.

Run: `.venv/bin/python bench/kernels_scores.py` (about 8 minutes on 2 cores);
`--sizes 256x16,4096x256` runs only those n x m; `--json` prints one JSON object a row.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _measure import (
    REFERENCE_ADDRESS_LIMIT,
    child,
    interleaved_times,
    limit_address_space,
    out_of_memory,
    peak_growth_mib,
    table,
)

from crl.losses import (
    info_nce,
    k_negative,
    k_negative_margins,
    lse_risk,
    scores_own,
    scores_shared,
    shared_negatives_loss,
)

SIZES = ((256, 16), (256, 256), (4096, 16), (4096, 256), (65536, 16), (65536, 256))
SHARED_SIZES = ((16384, 16384), (32768, 32768))  # large shared sets: SHARED_KERNELS alone
DIM, T = 128, 0.1
SHARED_KERNELS = ("shared_negatives/info_nce", "shared_negatives/lse")
KERNELS = (
    "info_nce/own",
    "info_nce/shared",
    "lse_risk/own",
    "lse_risk/shared",
    "k_negative/hinge",
    "k_negative/logistic",
    *SHARED_KERNELS,
)
IMPLS = ("crl", "plain")
REPEAT_SECONDS = 1.0  # timed repeats per kernel and size, crl and plain: about this long,
MIN_REPEATS, MAX_REPEATS = 3, 50  # and at least / at most this many
AA_MAX_SCORES = 65536  # up to n m scores the plain formulation is also timed as a third variant


def _own(kernel: str) -> bool:
    """Whether `kernel` runs on own negatives fneg (n, m, d)."""
    return kernel.endswith("/own") or kernel.startswith("k_negative/")


def _own_bytes(n: int, m: int) -> int:
    """Bytes of fneg (n, m, d) and its gradient in float32."""
    return 2 * n * m * DIM * 4


def crl_loss(kernel: str, fx: torch.Tensor, fpos: torch.Tensor, fneg: torch.Tensor) -> torch.Tensor:
    """The loss through crl's kernels. Shape: fx, fpos (n, d); fneg (n, m, d) or (m, d) -> ()."""
    name, variant = kernel.split("/")
    if name == "k_negative":
        return k_negative(k_negative_margins(fx, fpos, fneg), loss=variant).mean()
    if name == "shared_negatives":
        return shared_negatives_loss(fx, fpos, fneg, T, loss=variant)
    pos = (fx * fpos).sum(1)  # (n,)
    neg = scores_own(fx, fneg) if fneg.ndim == 3 else scores_shared(fx, fneg)  # (n, m)
    return (info_nce if name == "info_nce" else lse_risk)(pos, neg, T)


def plain_loss(
    kernel: str, fx: torch.Tensor, fpos: torch.Tensor, fneg: torch.Tensor
) -> torch.Tensor:
    """The loss as a user writes it in plain torch. Shapes as `crl_loss`."""
    name, variant = kernel.split("/")
    pos = (fx * fpos).sum(1, keepdim=True)  # (n, 1)
    if fneg.ndim == 3:
        neg = torch.bmm(fneg, fx.unsqueeze(2)).squeeze(2)  # (n, m, d) @ (n, d, 1) -> (n, m)
    else:
        neg = fx @ fneg.T  # (n, m)
    if name == "info_nce" or kernel == "shared_negatives/info_nce":
        logits = torch.cat([pos, neg], dim=1) / T  # (n, 1 + m), the positive in column 0
        target = torch.zeros(fx.shape[0], dtype=torch.long, device=fx.device)
        return F.cross_entropy(logits, target)
    if name == "lse_risk" or kernel == "shared_negatives/lse":
        return (T * (torch.logsumexp((neg - pos) / T, dim=1) - math.log(neg.shape[1]))).mean()
    if variant == "hinge":
        return torch.clamp(1 + (neg - pos).max(dim=1).values, min=0).mean()
    return torch.log2(1 + torch.exp(neg - pos).sum(dim=1)).mean()


def _inputs(n: int, m: int, own: bool) -> dict[str, torch.Tensor]:
    """Unit-norm fx, fpos (n, d) (fpos near fx), shared (m, d) and, `own`, own (n, m, d)."""
    gen = torch.Generator().manual_seed(1000 * n + m)
    fx = F.normalize(torch.randn(n, DIM, generator=gen), dim=1)
    fpos = F.normalize(fx + 0.5 * torch.randn(n, DIM, generator=gen), dim=1)
    shared = F.normalize(torch.randn(m, DIM, generator=gen), dim=1)
    out = {"fx": fx, "fpos": fpos, "shared": shared}
    if own:
        fneg = torch.randn(n, m, DIM, generator=gen)
        out["own"] = fneg.div_(fneg.norm(dim=2, keepdim=True))  # in place: one n m d buffer
    return {k: v.requires_grad_() for k, v in out.items()}


def _step(impl: str, kernel: str, inputs: dict[str, torch.Tensor]) -> Callable[[], torch.Tensor]:
    """One forward + backward of `impl`'s `kernel`; the gradients are left on the inputs."""
    loss = {"crl": crl_loss, "plain": plain_loss}[impl]
    leaves = (inputs["fx"], inputs["fpos"], inputs["own" if _own(kernel) else "shared"])

    def step() -> torch.Tensor:
        for leaf in leaves:
            leaf.grad = None
        value = loss(kernel, *leaves)
        value.backward()
        return value.detach()

    return step


def _grads(kernel: str, inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    return [inputs[k].grad for k in ("fx", "fpos", "own" if _own(kernel) else "shared")]


def _time_child(n: int, m: int, kernels: list[str]) -> dict:
    """Per kernel: crl's and plain's median time (interleaved repeats after a warm-up) and the
    differences of their values and gradients. A variant out of memory is reported as such."""
    limit_address_space()
    inputs = _inputs(n, m, own=any(_own(k) for k in kernels))
    out = {}
    for kernel in kernels:
        steps, first, res = {}, {}, {}
        for impl in IMPLS:  # the warm-up call: value and gradients
            try:
                step = _step(impl, kernel, inputs)
                first[impl] = (step().item(), _grads(kernel, inputs))
                steps[impl] = step
            except (RuntimeError, MemoryError) as err:
                res[f"{impl}_error"] = out_of_memory(err)["error"]
        if len(first) == len(IMPLS):
            (crl_value, crl_grads), (plain_value, plain_grads) = first["crl"], first["plain"]
            res["value_diff"] = abs(crl_value - plain_value)
            res["grad_diff"] = max(
                float((a - b).abs().max()) for a, b in zip(crl_grads, plain_grads, strict=True)
            )
            del crl_grads, plain_grads
        first.clear()  # frees the warm-up gradients
        if n * m <= AA_MAX_SCORES and "plain" in steps:  # the A/A control: plain, timed twice
            steps["plain_again"] = _step("plain", kernel, inputs)
            steps["plain_again"]()
        times, rounds = interleaved_times(steps, MIN_REPEATS, MAX_REPEATS, REPEAT_SECONDS)
        res |= {f"{impl}_ms": statistics.median(t) * 1e3 for impl, t in times.items()}
        res["repeats"] = rounds
        out[kernel] = res
    return out


def _memory_child(n: int, m: int, kernels: list[str]) -> dict:
    """Per kernel and variant: the growth of peak RSS during one call, after a warm-up of every
    variant on n = m = 2."""
    limit_address_space()
    tiny = _inputs(2, 2, own=True)
    for kernel in kernels:
        for impl in IMPLS:
            _step(impl, kernel, tiny)()
    inputs = _inputs(n, m, own=any(_own(k) for k in kernels))
    out: dict[str, dict] = {}
    for kernel in kernels:
        out[kernel] = {}
        for impl in IMPLS:
            for leaf in inputs.values():
                leaf.grad = None  # freed before the baseline, not during the call
            try:
                out[kernel][f"{impl}_peak_mib"] = peak_growth_mib(_step(impl, kernel, inputs))
            except (RuntimeError, MemoryError) as err:
                out[kernel][f"{impl}_error"] = out_of_memory(err)["error"]
    return out


def _rows(n: int, m: int, kernels: tuple[str, ...]) -> list[dict]:
    """One row per kernel at (n, m): times, their ratio, peak memory, value and grad diffs."""
    too_big = _own_bytes(n, m) > REFERENCE_ADDRESS_LIMIT
    run = [k for k in kernels if not (too_big and _own(k))]
    found: dict[str, dict] = {k: {} for k in run}
    if run:
        for kind, low_mmap in (("time", False), ("mem", True)):
            got = child(__file__, kind, str(n), str(m), ",".join(run), low_mmap=low_mmap)
            for kernel in run:  # a child that died reports for all its kernels
                found[kernel] |= (
                    got[kernel] if "error" not in got else {f"{kind}_error": got["error"]}
                )
    rows = []
    for kernel in kernels:
        res = found.get(kernel, {})
        crl_ms, plain_ms = res.get("crl_ms", math.nan), res.get("plain_ms", math.nan)
        errors = [f"{k.removesuffix('_error')}: {v}" for k, v in res.items() if k.endswith("error")]
        if kernel not in found:
            errors = [
                f"crl, plain: out of memory, fneg and its gradient need "
                f"{_own_bytes(n, m) / 2**30:.0f} GiB > {REFERENCE_ADDRESS_LIMIT / 2**30:.0f} GiB "
                "(not run)"
            ]
        rows.append(
            {
                "kernel": kernel,
                "n": n,
                "m": m,
                "crl_ms": crl_ms,
                "plain_ms": plain_ms,
                "crl/plain": crl_ms / plain_ms,
                "a/a": res.get("plain_again_ms", math.nan) / plain_ms,
                "repeats": res.get("repeats", 0),
                "crl_peak_mib": res.get("crl_peak_mib", math.nan),
                "plain_peak_mib": res.get("plain_peak_mib", math.nan),
                "value_diff": res.get("value_diff", math.nan),
                "grad_diff": res.get("grad_diff", math.nan),
                "note": "; ".join(errors),
            }
        )
    return rows


def _size(text: str) -> tuple[int, int]:
    n, m = text.lower().split("x")
    return int(n), int(m)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        type=lambda s: tuple(_size(t) for t in s.split(",")),
        default=SIZES,
        help="n x m pairs, e.g. 256x16,4096x256 (default: SIZES, then SHARED_SIZES for "
        "SHARED_KERNELS alone)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object a row, no table")
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32 CPU, d = {DIM}",
        flush=True,
    )
    runs = [(size, KERNELS) for size in args.sizes]
    if args.sizes == SIZES:
        runs += [(size, SHARED_KERNELS) for size in SHARED_SIZES]
    rows = []
    for (n, m), kernels in runs:
        print(f"kernels_scores: n = {n}, m = {m}", file=sys.stderr, flush=True)
        rows += _rows(n, m, kernels)
    if args.json:
        print("\n".join(json.dumps(row) for row in rows))
    else:
        print(table(rows))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, n, m, kernels = sys.argv[2:]
        measure = _time_child if kind == "time" else _memory_child
        print(json.dumps(measure(int(n), int(m), kernels.split(","))))
    else:
        main()
