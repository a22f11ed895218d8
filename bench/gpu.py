"""One prepared device benchmark: crl's kernels against their references on a GPU (a script).

Each row is one kernel at one size, timed on the device (synchronised, best of `rounds` after a
warm-up) next to its reference measured in the same run, with the peak device memory of each
(torch.cuda.max_memory_allocated; NaN on the CPU) and the largest absolute difference of values.

- nt_xent: crl.losses.nt_xent (path "auto") against the plain-torch formulation, forward +
  backward, D = 128, T = 0.1. The reference runs out of memory first: then its columns are NaN
  and the note says so.
- info_nce, lse_risk: crl.losses on shared negatives (`scores_shared`, path "auto": fused at
  these sizes) against the plain formulation, both from bench/kernels_scores.py
  (`crl_loss`, `plain_loss`), forward + backward, d = 128, T = 0.1.
- dense_info_nce: DenseCL's setting (7 x 7 grid, C = 128, queue 65536, T = 0.2) against the
  unchunked MoCo-style logits + F.cross_entropy, forward + backward.
- rademacher.linear: sign-suprema (d = 32, 64 draws, p = 128) against the same run's float32
  matmul peak (a 8192^3 matmul on a GPU): the ratio is useful flops / peak.
- random_conv embed: the dense backbone (crl.kernels.encoders.RandomConv, the embed actors'
  module) over a batch of 32 x 32 images, images per second, against the CPU in the same run.
- pretrain densecl: one epoch of the pretraining step (crl.steps.pretrain.train, what one
  Ray Train worker runs: fresh views, DenseCL through crl's kernels, Adam) with
  conf/dense.yaml's backbone, views and batch, in images per second of one worker, against the
  CPU in the same run.

`--small` shrinks every size so the script runs in seconds on a CPU (tests/test_bench_gpu.py
runs it so it cannot rot). Full sizes are meant for one GPU and finish in a few minutes.

Run: `.venv/bin/python bench/gpu.py [--small] [--device cuda]`; one JSON line per row.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import kernels_scores  # the scripts' folder is on sys.path: the score losses' two formulations
import torch
import torch.nn.functional as F

from crl import rademacher
from crl.core.dense_config import DenseConfig
from crl.dense import dense_info_nce
from crl.kernels.encoders import RandomConv
from crl.losses import nt_xent
from crl.steps import pretrain
from crl.steps.dense import image_data
from crl.steps.dense.pretrain_task import DenseTask

FULL = {
    "nt_xent": (4096, 16384, 65536),
    "scores": ((65536, 4096), (65536, 16384)),  # n anchors x m shared negatives
    "dense": (16, 64),  # images per batch
    "dense_queue": 65536,
    "sign_rows": 10_000_000,
    "peak": 8192,
    "embed_images": 4096,
    "pretrain_images": 4096,
    "rounds": 3,
}
SMALL = {
    "nt_xent": (8, 64),
    "scores": ((64, 8),),
    "dense": (2,),
    "dense_queue": 256,
    "sign_rows": 4096,
    "peak": 256,
    "embed_images": 16,
    "pretrain_images": 32,
    "rounds": 1,
}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _measure(step: Callable[[], torch.Tensor], device: torch.device, rounds: int) -> dict:
    """Best time of `step` over `rounds` after a warm-up, its value, its peak device memory."""
    try:
        value = float(step())
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        best = math.inf
        for _ in range(rounds):
            _sync(device)
            start = time.perf_counter()
            step()
            _sync(device)
            best = min(best, time.perf_counter() - start)
        peak = (
            torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else math.nan
        )
        return {"seconds": best, "value": value, "peak_mib": peak}
    except torch.OutOfMemoryError as err:
        return {"error": f"out of memory: {str(err).splitlines()[0][:80]}"}
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()


def plain_nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """Normalise, one (2B, 2B) similarity matrix, diagonal masked, cross-entropy."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    sim = (z @ z.T).div_(temperature)
    sim.fill_diagonal_(-math.inf)
    partner = (torch.arange(z.shape[0], device=z.device) + z1.shape[0]) % z.shape[0]
    return F.cross_entropy(sim, partner)


def naive_dense(v1, v2, pairs, temperature: float, queue: torch.Tensor) -> torch.Tensor:
    """One (B K) x (B K + Q) logit matrix, one positive per position (pairs (b, k, k))."""
    B, K, C = v1.shape
    a = v1.reshape(B * K, C)
    logits = torch.cat([a @ v2.reshape(-1, C).T, a @ queue.T], dim=1) / temperature
    return F.cross_entropy(logits[pairs[:, 0] * K + pairs[:, 1]], pairs[:, 0] * K + pairs[:, 2])


def _pair(name: str, size: dict, crl: dict, ref: dict, ref_name: str) -> dict:
    row = {"bench": name, **size, "reference": ref_name}
    for who, res in (("crl", crl), ("ref", ref)):
        row[f"{who}_ms"] = res.get("seconds", math.nan) * 1e3
        row[f"{who}_peak_mib"] = res.get("peak_mib", math.nan)
    row["speedup"] = ref.get("seconds", math.nan) / crl.get("seconds", math.nan)
    row["max_abs_diff"] = abs(crl.get("value", math.nan) - ref.get("value", math.nan))
    row["note"] = "; ".join(
        f"{w}: {r['error']}" for w, r in (("crl", crl), ("ref", ref)) if "error" in r
    )
    return row


def _backward(inputs: tuple[torch.Tensor, ...], loss: Callable[[], torch.Tensor]):
    """A step: clear the inputs' gradients, forward, backward; returns the detached loss."""

    def step() -> torch.Tensor:
        for x in inputs:
            x.grad = None
        value = loss()
        value.backward()
        return value.detach()

    return step


def bench_nt_xent(device: torch.device, sizes: dict) -> list[dict]:
    rows = []
    for batch in sizes["nt_xent"]:
        gen = torch.Generator(device=device).manual_seed(batch)
        z = [torch.randn(batch, 128, generator=gen, device=device).requires_grad_() for _ in "12"]
        results = [
            _measure(_backward(tuple(z), partial(fn, *z, 0.1)), device, sizes["rounds"])
            for fn in (nt_xent, plain_nt_xent)
        ]
        rows.append(_pair("nt_xent", {"B": batch}, *results, "plain torch"))
    return rows


def bench_scores(device: torch.device, sizes: dict) -> list[dict]:
    rows = []
    for n, m in sizes["scores"]:
        gen = torch.Generator(device=device).manual_seed(n + m)
        fx, fpos = (
            F.normalize(torch.randn(n, 128, generator=gen, device=device), dim=1) for _ in "ab"
        )
        fneg = F.normalize(torch.randn(m, 128, generator=gen, device=device), dim=1)
        inputs = tuple(t.requires_grad_() for t in (fx, fpos, fneg))
        for name in ("info_nce", "lse_risk"):  # bench/kernels_scores.py's two formulations
            results = [
                _measure(
                    _backward(inputs, partial(fn, f"{name}/shared", *inputs)),
                    device,
                    sizes["rounds"],
                )
                for fn in (kernels_scores.crl_loss, kernels_scores.plain_loss)
            ]
            rows.append(_pair(name, {"n": n, "m": m}, *results, "plain torch"))
    return rows


def bench_dense(device: torch.device, sizes: dict) -> list[dict]:
    rows = []
    k, c, q = 49, 128, sizes["dense_queue"]
    for batch in sizes["dense"]:
        gen = torch.Generator(device=device).manual_seed(batch)
        v = [
            F.normalize(
                torch.randn(batch, k, c, generator=gen, device=device), dim=-1
            ).requires_grad_()
            for _ in "12"
        ]
        queue = F.normalize(torch.randn(q, c, generator=gen, device=device), dim=-1)
        pos = torch.arange(k, device=device).repeat(batch)
        pairs = torch.stack([torch.arange(batch, device=device).repeat_interleave(k), pos, pos], 1)
        crl = partial(dense_info_nce, *v, pairs, 0.2, queue=queue)
        ref = partial(naive_dense, *v, pairs, 0.2, queue)
        results = [_measure(_backward(tuple(v), f), device, sizes["rounds"]) for f in (crl, ref)]
        rows.append(_pair("dense_info_nce", {"B": batch, "K": k, "Q": q}, *results, "unchunked"))
    return rows


def bench_signs(device: torch.device, sizes: dict) -> list[dict]:
    n, p, d, draws, side = sizes["sign_rows"], 128, 32, 64, sizes["peak"]
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(side, side, generator=gen, device=device)
    features = torch.randn(n, p, generator=gen, device=device)
    peak = _measure(lambda: (a @ a).sum(), device, sizes["rounds"])
    crl = _measure(
        lambda: torch.tensor(rademacher.linear(features, d, 1.0, draws, 7).value),
        device,
        sizes["rounds"],
    )
    peak_flops = 2 * side**3 / peak["seconds"]
    useful = 2 * draws * d * n * p / crl["seconds"]
    return [
        {
            "bench": "rademacher.linear",
            "rows": n,
            "p": p,
            "d": d,
            "draws": draws,
            "crl_ms": crl["seconds"] * 1e3,
            "crl_peak_mib": crl["peak_mib"],
            "peak_gflops": peak_flops / 1e9,
            "gflops": useful / 1e9,
            "ratio_to_peak": useful / peak_flops,
        }
    ]


def bench_embed(device: torch.device, sizes: dict) -> list[dict]:
    images = sizes["embed_images"]
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(images, 3, 32, 32, generator=gen)
    results = {}
    for where in dict.fromkeys([device, torch.device("cpu")]):
        net = RandomConv(3, 64, 3, 2, 4, seed=0).to(where).eval()
        batch = x.to(where)
        with torch.no_grad():
            results[where.type] = _measure(lambda: net(batch).sum(), where, sizes["rounds"])  # noqa: B023
    dev, cpu = results[device.type], results["cpu"]
    return [
        {
            "bench": "random_conv embed",
            "images": images,
            "images_per_s": images / dev["seconds"],
            "cpu_images_per_s": images / cpu["seconds"],
            "speedup_vs_cpu": cpu["seconds"] / dev["seconds"],
            "max_abs_diff": abs(dev["value"] - cpu["value"]) / images,
        }
    ]


def bench_pretrain(device: torch.device, sizes: dict) -> list[dict]:
    images = sizes["pretrain_images"]
    dense = DenseConfig.model_validate(
        {
            "images": {"kind": "shapes", "size": 48, "classes": 4, "shards": 1},
            "views": {"size": 32},
            "backbone": {"channels": 32, "layers": 3, "downsample": 2, "grid": 4},
            "grid": {"m": [2], "n": [2]},
            "pretrain": {"epochs": 1, "images": images, "batch": min(64, images)},
        }
    )
    seconds = {}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        shards = image_data.ImageShardJob(dense, 0, root / "data", root / "staging")
        for spec in image_data.pretrain_plan(dense):
            image_data.write_pretrain_shard(spec, shards)
        for where in dict.fromkeys([device, torch.device("cpu")]):
            job = pretrain.PretrainJob(dense.pretrain, DenseTask(dense, 3), root, root / "staging")
            for path in (job.state, job.epoch_row(1)):
                path.unlink(missing_ok=True)
            pretrain.train(job, pretrain.SingleProcess(where.type))
            seconds[where.type] = pretrain.epoch_rows(root).to_pylist()[-1]["seconds"]
    return [
        {
            "bench": "pretrain densecl",
            "images": images,
            "images_per_s": images / seconds[device.type],
            "cpu_images_per_s": images / seconds["cpu"],
            "speedup_vs_cpu": seconds["cpu"] / seconds[device.type],
        }
    ]


def run(small: bool = False, device: str | None = None) -> list[dict]:
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    sizes = SMALL if small else FULL
    rows = []
    benches = (bench_nt_xent, bench_scores, bench_dense, bench_signs, bench_embed, bench_pretrain)
    for bench in benches:
        rows += [{"device": str(dev), **row} for row in bench(dev, sizes)]
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="tiny sizes (CPU, seconds)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    args = parser.parse_args()
    if torch.cuda.is_available():
        print(json.dumps({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}))
    for record in run(args.small, args.device):
        print(json.dumps(record), flush=True)
