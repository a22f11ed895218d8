"""Executors decide where steps run, never what they do (datatrove's split of step and executor).

A step is a plain, picklable, module-level function `step(item, context) -> result` of the steps
layer (or, for `map_workers`, a plain class whose instances are called on items). Both executors
run the same steps:

- `LocalExecutor`: in this process, one item after another; no Ray. For debugging with a
  debugger (`crl run --executor local`) and for fast tests of the steps.
- `RayExecutor`: one Ray task per item (a worker that dies is retried up to 3 times by Ray) and
  a pool of actors for workers: one actor per GPU when the cluster has GPUs, otherwise CPU actors
  that leave one CPU to the readers (a pool that takes every CPU deadlocks them). An actor that
  is lost with its process or node is replaced by a new one, which takes its item (Ray's own
  actor restarts spend their retries while a lost node is not yet declared dead). A
  private local Ray starts with the first item to run, not before: a rerun whose units are all
  finished never starts one (about 6 s saved); a cluster is connected to at `start`.

`train` runs a training loop of the steps layer: on Ray Train workers (crl.orchestration.train)
or, with the local executor, in this process.

An application error inside a step becomes a `Failure` (error line and traceback) in the results,
so the other items go on; the caller decides what a failure means.
"""

from __future__ import annotations

import sys
import traceback
from abc import ABC, abstractmethod
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crl.core.errors import ConfigError
from crl.orchestration.progress import Progress

Step = Callable[[Any, Any], Any]
# how often one item of `map_workers` may lose its worker (a dead process or node) before the
# stage fails: each loss gives the item to a new worker
WORKER_LOSSES = 3


@dataclass(frozen=True)
class Failure:
    """An item whose step raised: the item, `Type: message`, and the formatted traceback."""

    item: Any
    error: str
    traceback: str


def call_step(step: Step, item: Any, context: Any, threads: int) -> Any:
    """`step(item, context)` with `threads` torch threads; an application error -> Failure."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return step(item, context)
    except Exception as err:
        return Failure(item, f"{type(err).__name__}: {err}", traceback.format_exc())
    finally:
        torch.set_num_threads(previous)


class _WorkerHost:
    """Holds one worker (an instance of a plain step class) inside a Ray actor."""

    def __init__(self, worker: type, args: tuple) -> None:
        self.worker = worker(*args)

    def run(self, item: Any) -> Any:
        return self.worker(item)


@dataclass(frozen=True)
class Training:
    """How a training runs: workers, GPUs ("auto": when the cluster has one per worker), Ray
    Train's storage and run name, the context of a run without workers, a progress hook, and
    the config section that sets it (named by its errors)."""

    workers: int
    use_gpu: bool | str
    storage: Path
    name: str
    single: Callable[[], Any]
    watch: Callable[[], None]
    section: str = "pretrain"


class Executor(ABC):
    """Runs steps over items and reports progress; `where` says where they ran."""

    @abstractmethod
    def start(self) -> None:
        """Set up what must exist before work is planned (e.g. connect to a Ray cluster)."""

    @abstractmethod
    def where(self) -> str:
        """A short description of where the work ran (or would run)."""

    @abstractmethod
    def check_cpus(self, cpus: float, field: str = "runtime.cell_cpus") -> None:
        """Raise ConfigError when no worker could ever get `cpus` CPUs (a task would hang)."""

    @abstractmethod
    def map(
        self,
        step: Step,
        items: Sequence[Any],
        context: Any,
        *,
        label: str,
        cpus: float = 1.0,
        progress: bool = True,
    ) -> list[Any]:
        """`step(item, context)` for every item, each with `cpus` CPUs; results or Failures."""

    @abstractmethod
    def map_workers(
        self, worker: type, args: tuple, items: Sequence[Any], *, label: str, progress: bool = True
    ) -> list[Any]:
        """`worker(*args)(item)` for every item, on a pool of workers sized by the executor."""

    @abstractmethod
    def train(self, loop: Callable, job: Any, training: Training) -> None:
        """`loop(job, ctx)` as a (distributed) training: on Ray Train workers, or in this
        process with `training.single()` as the context; `training.watch()` about once a
        second meanwhile, and once at the end."""


def _threads(cpus: float) -> int:
    return max(1, int(cpus))


class LocalExecutor(Executor):
    """Every item in this process, in order."""

    def start(self) -> None:
        return None

    def where(self) -> str:
        return "this process (local executor, no Ray)"

    def check_cpus(self, cpus: float, field: str = "runtime.cell_cpus") -> None:
        return None  # steps run here one after another, whatever `cpus` asks

    def map(
        self,
        step: Step,
        items: Sequence[Any],
        context: Any,
        *,
        label: str,
        cpus: float = 1.0,
        progress: bool = True,
    ) -> list[Any]:
        bar = Progress(label, len(items), progress)
        results = []
        for item in items:
            results.append(call_step(step, item, context, _threads(cpus)))
            bar.advance()
        return results

    def map_workers(
        self, worker: type, args: tuple, items: Sequence[Any], *, label: str, progress: bool = True
    ) -> list[Any]:
        if not items:
            return []
        bar = Progress(label, len(items), progress)
        instance = worker(*args)
        results = []
        for item in items:
            results.append(instance(item))
            bar.advance()
        return results

    def train(self, loop: Callable, job: Any, training: Training) -> None:
        from crl.orchestration.train import worker_threads

        with worker_threads():  # a Ray Train worker's threads: the same weights, bit for bit
            loop(job, training.single())
        training.watch()


class RayExecutor(Executor):
    """Ray tasks for `map`, a Ray actor pool for `map_workers`; local Ray or a cluster."""

    def __init__(self, address: str | None = None) -> None:
        from crl.orchestration import runtime

        self.address = address
        self.local = runtime.is_local(address)
        self._where: str | None = None

    def start(self) -> None:
        from crl.orchestration import runtime

        runtime.ray_environment(self.address)  # before anything imports ray, which reads it
        if not self.local:
            self._connect()

    def _connect(self) -> None:
        """Start the private local Ray, or connect to the cluster, once."""
        from crl.orchestration import runtime

        if self._where is None:
            self._where = runtime.ray_init(self.address)

    def where(self) -> str:
        return self._where or "nothing to compute (the local Ray was not started)"

    def check_cpus(self, cpus: float, field: str = "runtime.cell_cpus") -> None:
        from crl.orchestration import runtime

        if self._where is None and self.local:
            available = float(runtime.local_cpus())  # what the private Ray will offer
        else:
            import ray

            available = float(ray.cluster_resources().get("CPU", 0.0))
        if cpus > available:
            raise ConfigError(
                f"config field {field}: {cpus:g} CPUs per unit, but the Ray cluster has "
                f"{available:g}: no unit could ever be scheduled"
            )

    def map(
        self,
        step: Step,
        items: Sequence[Any],
        context: Any,
        *,
        label: str,
        cpus: float = 1.0,
        progress: bool = True,
    ) -> list[Any]:
        if not items:
            return []
        self._connect()
        import ray

        task = ray.remote(call_step).options(num_cpus=cpus, max_retries=3)
        shared = ray.put(context)  # once, not once per task
        pending = [task.remote(step, item, shared, _threads(cpus)) for item in items]
        bar = Progress(label, len(items), progress)
        results = []
        while pending:
            # block for one result, then take every other finished one in the same call: one
            # wait per result over a long pending list would fall behind fast cells
            ready, pending = ray.wait(pending, num_returns=1)
            if pending:
                more, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
                ready += more
            for value in ray.get(ready):
                results.append(value)
                bar.advance()
        return results

    def map_workers(
        self, worker: type, args: tuple, items: Sequence[Any], *, label: str, progress: bool = True
    ) -> list[Any]:
        if not items:
            return []
        self._connect()
        import ray

        resources = ray.cluster_resources()
        gpus = float(resources.get("GPU", 0.0))
        if gpus >= 1:
            size, options = int(gpus), {"num_gpus": 1, "num_cpus": 1}
        else:
            size, options = max(1, int(resources.get("CPU", 1.0)) - 1), {"num_cpus": 1}
        host = ray.remote(_WorkerHost).options(**options)
        new_worker = lambda: host.remote(worker, args)  # noqa: E731
        queue = deque(enumerate(items))
        running: dict[Any, tuple[Any, int]] = {}  # result -> (actor, item's index)

        def give(actor: Any) -> None:
            if queue:
                index, item = queue.popleft()
                running[actor.run.remote(item)] = (actor, index)

        for _ in range(min(size, len(items))):
            give(new_worker())
        bar = Progress(label, len(items), progress)
        results: list[Any] = [None] * len(items)
        losses: Counter[int] = Counter()
        while running:
            (done,), _ = ray.wait(list(running), num_returns=1)
            actor, index = running.pop(done)
            try:
                results[index] = ray.get(done)
                bar.advance()
            except ray.exceptions.RayActorError as err:  # its process or node is gone
                losses[index] += 1
                if err.actor_init_failed or losses[index] > WORKER_LOSSES:
                    raise  # the worker's own constructor failed: not a loss
                actor = self._replace(actor, new_worker, label, err)
                queue.appendleft((index, items[index]))
            give(actor)
        return results

    @staticmethod
    def _replace(actor: Any, new_worker: Callable[[], Any], label: str, err: Exception) -> Any:
        """A new worker in place of a lost one (a dead process or node; one that is only
        unreachable for now is stopped, so that no two run the same items)."""
        import ray

        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # already gone
            pass
        reason = str(err).strip().splitlines()[0][:160]
        sys.stderr.write(
            f"crl: a worker of {label} was lost ({reason}); a new one takes its item\n"
        )
        return new_worker()

    def train(self, loop: Callable, job: Any, training: Training) -> None:
        self._connect()
        from crl.orchestration.train import fit_on_ray

        fit_on_ray(
            loop,
            job,
            workers=training.workers,
            use_gpu=training.use_gpu,
            storage=training.storage,
            name=training.name,
            watch=training.watch,
            section=training.section,
        )


EXECUTORS = ("ray", "local")


def make_executor(kind: str, ray_address: str | None = None) -> Executor:
    """The executor called `kind`: "ray" (default; local Ray or `ray_address`) or "local"."""
    if kind == "local":
        return LocalExecutor()
    if kind == "ray":
        return RayExecutor(ray_address)
    raise ValueError(f"executor={kind!r}: expected one of {EXECUTORS}")
