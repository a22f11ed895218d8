"""A training loop of crl.steps run by Ray Train: `TorchTrainer` over `workers` workers (DDP;
gloo on CPUs, NCCL on GPUs), the same code path on the local Ray and on a cluster.

The loop is a plain function `loop(job, ctx)` of crl.steps; `_RayTrainContext` is its context on
a Ray Train worker (rank, world size, device, DDP wrapping, collectives). A worker that dies
(its node lost) makes Ray Train restart the worker group, up to `MAX_FAILURES` times, and the
loop continues from its last finished epoch on disk.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from crl.core.errors import ConfigError
from crl.core.places import resolved

MAX_FAILURES = 2


class _RayTrainContext:
    """The context of one Ray Train worker (crl.steps.pretrain.Context)."""

    def __init__(self) -> None:
        import ray.train
        import ray.train.torch

        context = ray.train.get_context()
        self.rank = context.get_world_rank()
        self.world_size = context.get_world_size()
        self.device = ray.train.torch.get_device()

    def wrap(self, model: nn.Module) -> nn.Module:
        import ray.train.torch

        return ray.train.torch.prepare_model(model)

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        if self.world_size == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        torch.distributed.all_gather(parts, x.contiguous())
        return torch.cat(parts)

    def gather_grad(self, x: torch.Tensor) -> torch.Tensor:
        return all_gather_grad(x) if self.world_size > 1 else x

    def total(self, values: list[float]) -> list[float]:
        if self.world_size == 1:
            return values
        sums = torch.tensor(values, dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(sums)
        return sums.tolist()


def all_gather_grad(x: torch.Tensor) -> torch.Tensor:
    """Every worker's x concatenated in rank order, differentiable: the backward pass sums the
    gradients of all workers' losses onto each worker's own rows (torch.distributed.nn)."""
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(x.contiguous()))


# CPUs (and torch threads) of one training worker. A worker's float arithmetic depends on its
# thread count (reductions split differently), so the local executor trains with as many: the
# weights of a local run equal a Ray run's bit for bit (tests/orchestration/test_executor_parity)
WORKER_CPUS = 1


def worker_threads() -> contextlib.AbstractContextManager[None]:
    """torch at WORKER_CPUS threads inside the block (the thread count before it after)."""
    return _torch_threads(WORKER_CPUS)


@contextlib.contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _worker(config: dict) -> None:
    with worker_threads():  # Ray sets OMP_NUM_THREADS to the CPUs, unless the user set it
        config["loop"](config["job"], _RayTrainContext())


def use_gpus(use_gpu: bool | str, workers: int) -> bool:
    """Whether the training takes one GPU per worker: `use_gpu` true, or "auto" and the
    cluster has a GPU for every worker."""
    import ray

    if use_gpu == "auto":
        return ray.cluster_resources().get("GPU", 0.0) >= workers
    return bool(use_gpu)


def _check_resources(workers: int, gpu: bool, section: str) -> None:
    """Refuse a training the cluster can never place (Ray Train would wait for it)."""
    import ray

    resources = ray.cluster_resources()
    cpus, gpus = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
    if cpus < workers:
        raise ConfigError(
            f"config field {section}.workers: {workers} workers of 1 CPU each, but the Ray "
            f"cluster has {cpus:g} CPUs"
        )
    if gpu and gpus < workers:
        raise ConfigError(
            f"config field {section}.use_gpu: {workers} workers of 1 GPU each, but the Ray "
            f"cluster has {gpus:g} GPUs"
        )


def fit_on_ray(
    loop: Callable[[Any, Any], None],
    job: Any,
    *,
    workers: int,
    use_gpu: bool | str,
    storage: Path,
    name: str,
    watch: Callable[[], None],
    section: str = "pretrain",
) -> None:
    """Run `loop(job, ctx)` on `workers` Ray Train workers; `watch()` is called about once a
    second while it runs (progress). Raises RuntimeError when the training fails, ConfigError
    (naming the config `section`) when the cluster cannot place it."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    gpu = use_gpus(use_gpu, workers)
    _check_resources(workers, gpu, section)
    trainer = TorchTrainer(
        _worker,
        train_loop_config={"loop": loop, "job": job},
        scaling_config=ScalingConfig(
            num_workers=workers,
            use_gpu=gpu,
            resources_per_worker={"CPU": WORKER_CPUS, **({"GPU": 1} if gpu else {})},
        ),
        run_config=RunConfig(
            name=name,
            storage_path=resolved(storage),  # Ray Train reads a URI: never a relative path
            failure_config=FailureConfig(max_failures=MAX_FAILURES),
        ),
    )
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(1.0):
            watch()

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        trainer.fit()
    except Exception as err:  # Ray Train's TrainingFailedError and its kin
        raise RuntimeError(f"{name}: the training failed: {str(err).strip()[:2000]}") from None
    finally:
        stop.set()
        watcher.join()
        watch()
