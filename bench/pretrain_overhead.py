"""Ray Train against the plain loop on the same pretraining steps (not a timed test).

The quickstart's DenseCL pretraining (conf/quickstart.yaml's dense section: 1024 generated
images, batch 64, 16 steps an epoch) is trained for `short` and `long` epochs in two ways, each
from the same materialised split and to the same weights:

- plain: `LocalExecutor.train`, the loop in this process at one torch thread (a Ray Train
  worker's thread count);
- Ray Train: `RayExecutor.train`, one Ray Train worker on a private local Ray that is started
  before the first measurement (Ray's own start is printed apart; `crl run` pays it once for
  every stage).

After one unmeasured run of each way, the (way, epochs) runs are interleaved round by round,
the order reversed every other round. For each way the medians give wall = start-up + epochs x
epoch: the slope is the steady-state seconds per epoch (steps, the end-of-epoch retrieval,
checkpoint and state), the intercept the start-up (for Ray Train, the worker group's start and
teardown). Also the steps alone: the median over epochs of the rows' `seconds` (an epoch's
training steps, timed inside the loop), which leaves out what happens between epochs. Prints
Ray Train's steady-state time over the plain loop's (target <= 1.10), the same for the steps
alone, and its start-up in seconds.

Usage: .venv/bin/python bench/pretrain_overhead.py [--short 2] [--long 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from crl.core.config import load  # noqa: E402
from crl.orchestration import runtime  # noqa: E402
from crl.orchestration.executor import LocalExecutor, RayExecutor, Training  # noqa: E402
from crl.steps import pretrain  # noqa: E402
from crl.steps.dense import image_data  # noqa: E402
from crl.steps.dense.pretrain_task import DenseTask  # noqa: E402


def _materialize(config_path: Path, epochs: int, folder: Path) -> pretrain.PretrainJob:
    """The config's dense pretraining split written under `folder`, as a job of `epochs`."""
    config = load(config_path)
    dense = config.dense.model_copy(
        update={"pretrain": config.dense.pretrain.model_copy(update={"epochs": epochs})}
    )
    shards = image_data.ImageShardJob(dense, config.seed, folder / "data", folder / "staging")
    for spec in image_data.pretrain_plan(dense):
        image_data.write_pretrain_shard(spec, shards)
    task = DenseTask(dense, image_data.channels(dense))
    return pretrain.PretrainJob(dense.pretrain, task, folder, folder / "staging")


def _fresh(job: pretrain.PretrainJob, epochs: int, folder: Path) -> pretrain.PretrainJob:
    """A job of `epochs` over a copy of `job`'s split in the empty `folder`."""
    shutil.copytree(job.data, folder / "data")
    p = job.pretrain.model_copy(update={"epochs": epochs, "checkpoints": [epochs]})
    return pretrain.PretrainJob(p, job.task, folder, folder / "staging")


def _train(executor, job: pretrain.PretrainJob, storage: Path) -> float:
    training = Training(
        1, False, storage, f"bench-{storage.name}", pretrain.SingleProcess, lambda: None
    )
    started = time.perf_counter()
    executor.train(pretrain.train, job, training)
    return time.perf_counter() - started


def _fit(walls: dict[int, float]) -> tuple[float, float]:
    """Slope and intercept of the line through the two (epochs, wall) points."""
    (e1, w1), (e2, w2) = sorted(walls.items())
    slope = (w2 - w1) / (e2 - e1)
    return slope, w1 - slope * e1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO / "conf" / "quickstart.yaml")
    parser.add_argument("--short", type=int, default=2)
    parser.add_argument("--long", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crl-bench-pretrain-") as tmp:
        root = Path(tmp)
        source = _materialize(args.config, args.long, root / "source")
        started = time.perf_counter()
        where = runtime.ray_init()
        print(f"Ray's own start: {time.perf_counter() - started:.1f} s ({where})")
        ways = {"plain": LocalExecutor(), "ray_train": RayExecutor()}
        for way, executor in ways.items():  # unmeasured: imports, caches, Ray Train's modules
            warm = root / f"warm-{way}"
            _train(executor, _fresh(source, args.short, warm), warm / "ray-train")
        runs = [(way, e) for way in ways for e in (args.short, args.long)]
        walls: dict[tuple[str, int], list[float]] = {run: [] for run in runs}
        weights: dict[tuple[str, int], dict] = {}
        steps: dict[str, list[float]] = {way: [] for way in ways}
        for r in range(args.rounds):
            for way, epochs in runs if r % 2 == 0 else runs[::-1]:
                folder = root / f"{way}-{epochs}-{r}"
                job = _fresh(source, epochs, folder)
                walls[way, epochs].append(_train(ways[way], job, folder / "ray-train"))
                weights[way, epochs] = torch.load(job.checkpoint(epochs), weights_only=True)
                steps[way].extend(pretrain.epoch_rows(job.root).column("seconds").to_pylist())
                print(f"  round {r}: {way:9s} {epochs:2d} epochs {walls[way, epochs][-1]:6.1f} s")
        fits = {
            way: _fit({e: statistics.median(walls[way, e]) for e in (args.short, args.long)})
            for way in ways
        }
    print("way        s/epoch (steady)  start-up s")
    for way, (slope, intercept) in fits.items():
        print(f"{way:10s} {slope:16.2f}  {intercept:10.1f}")
    ratio = fits["ray_train"][0] / fits["plain"][0]
    same = all(
        torch.equal(tensor, weights["ray_train", e][name])
        for e in (args.short, args.long)
        for name, tensor in weights["plain", e].items()
    )
    print(f"Ray Train steady-state over the plain loop: {ratio:.3f} (target <= 1.10)")
    inner = statistics.median(steps["ray_train"]) / statistics.median(steps["plain"])
    print(f"the steps alone (median epoch, timed in the loop): {inner:.3f}")
    extra = fits["ray_train"][1] - fits["plain"][1]
    print(f"Ray Train start-up over the plain loop's: {extra:.1f} s")
    print(f"the same weights both ways: {same}")


if __name__ == "__main__":
    main()
