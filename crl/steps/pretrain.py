"""The pretraining step: an encoder trained contrastively on a pretraining split.

What one worker of the training runs (`train`); crl.orchestration.train launches it on Ray
Train (DDP over `pretrain.workers` workers) or, with the local executor, in the process. The
worker's `Context` is the only thing that knows about distribution: its rank, the world size,
the device, how to wrap the model (DDP) and how to gather keys and sum numbers over workers.
What is trained, on what and with which views is the job's `Task`: the dense section's
backbone (crl.steps.dense.pretrain_task) or the grid's small_cnn encoder
(crl.steps.unimodal.pretrain_task).

Files, under the job's root (written by rank 0, each atomically):
  data/part-<k>.parquet     the pretraining split (written by the materialize stage)
  checkpoints/epoch=<e>.pt  the encoder's weights after e epochs (a plain state dict of
                            tensors, loaded with torch.load(weights_only=True)), for every
                            epoch in pretrain.checkpoints; epoch 0 is the initialisation
  epochs/epoch=<e>.parquet  one row per epoch: loss, images, seconds, throughput (the
                            pretrain table, crl.steps.schema "pretrain")
  state.pt                  what resuming needs after epoch e: the encoder, the key encoder,
                            the optimizer, the queues, e and its row; written after the
                            epoch's checkpoint and before its row, so it is the epoch's
                            commit point
Every epoch's randomness (the order of the images, the views) comes from generators keyed by
(seed, epoch, rank): an epoch after a resume draws what it would have drawn without the
interruption, so a resumed pretraining ends with the same weights as an uninterrupted one.
The epochs' numbers go to those files, not to `ray.train.report`: Ray Train 2 keeps no metrics
reported without a checkpoint, and each report waits about 2 s for the controller's poll (200 s
over 100 short epochs, measured).
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import nn

from crl.core.pretrain_config import PretrainConfig
from crl.kernels import pretrain as objectives
from crl.kernels.seeding import generator
from crl.steps import store
from crl.steps.atomic import write_bytes_atomic, write_parquet_atomic


class Context(Protocol):
    """Where one training worker runs."""

    rank: int
    world_size: int
    device: torch.device

    def wrap(self, model: nn.Module) -> nn.Module:
        """The model as the workers train it together (DDP), on the device."""

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """Every worker's x, concatenated along the first axis in rank order."""

    def gather_grad(self, x: torch.Tensor) -> torch.Tensor:
        """`gather`, through which gradients flow back to each worker's rows."""

    def total(self, values: list[float]) -> list[float]:
        """The sums over workers (once per epoch, after its last step)."""


class SingleProcess:
    """The context of a training without workers (the local executor): one process."""

    rank, world_size = 0, 1

    def __init__(self, device: str | None = None) -> None:
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))

    def wrap(self, model: nn.Module) -> nn.Module:
        return model.to(self.device)

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def gather_grad(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def total(self, values: list[float]) -> list[float]:
        return values


class Task(Protocol):
    """What is pretrained: the encoder, its inputs and their views."""

    family: str  # whose encoder: "unimodal" (encoder.pretrain) or "dense" (dense.pretrain)
    width: int  # features per position of the encoder's output (the projections' input)

    def network(self) -> nn.Module:
        """The encoder at its initialisation (epoch 0): inputs -> (N, C) or (N, K, C)."""

    def inputs(self, data: Path) -> torch.Tensor:
        """The pretraining split under `data`, in id order, as stored (N, ...)."""

    def views(
        self, batch: torch.Tensor, gen: torch.Generator, dense: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Two augmented views of `batch` (rows of `inputs`) drawn from `gen`, and with
        `dense` the geometric correspondent in view 2 of each view-1 position (B, K)."""


@dataclass(frozen=True)
class PretrainJob:
    """What every worker of one pretraining shares."""

    pretrain: PretrainConfig
    task: Task
    root: Path  # <run>/pretrain (encoder.pretrain) or <run>/dense/pretrain (dense.pretrain)
    staging: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    def checkpoint(self, epoch: int) -> Path:
        return self.root / "checkpoints" / f"epoch={epoch}.pt"

    def epoch_row(self, epoch: int) -> Path:
        return self.root / "epochs" / f"epoch={epoch}.parquet"

    @property
    def state(self) -> Path:
        return self.root / "state.pt"


def load_weights(network: nn.Module, path: Path) -> nn.Module:
    """`network` with the weights of checkpoint `path`, frozen; nothing in the file is
    unpickled but tensors (weights_only)."""
    network.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return network.requires_grad_(False)


def finished_epochs(job: PretrainJob) -> int:
    """Epochs whose state is on disk (0 when none): where a rerun continues."""
    if not job.state.exists():
        return 0
    return int(torch.load(job.state, map_location="cpu", weights_only=True)["epoch"])


def is_done(job: PretrainJob) -> bool:
    """Whether every epoch ran and every chosen checkpoint is on disk."""
    p = job.pretrain
    return finished_epochs(job) >= p.epochs and all(job.checkpoint(e).exists() for e in p.embedded)


def _save(obj: object, path: Path, staging: Path) -> None:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    write_bytes_atomic(buffer.getvalue(), path, staging)


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if hasattr(model, "module") else model


def _restore(
    job: PretrainJob,
    encoder: nn.Module,
    key: nn.Module | None,
    queues: tuple[objectives.Queue, ...],
) -> tuple[int, dict | None]:
    """The state of the last finished epoch loaded into the encoder, its momentum copy and the
    queues: that epoch and the optimizer's state (0 and None when none finished)."""
    start = finished_epochs(job)
    if not start:
        return 0, None
    state = torch.load(job.state, map_location="cpu", weights_only=True)
    encoder.load_state_dict(state["encoder"])
    if key is not None:
        key.load_state_dict(state["key"])
    for q, s in zip(queues, state["queues"], strict=True):
        q.load(s)
    return start, state["optimizer"]


def _finish_epoch(
    job: PretrainJob,
    row: dict,
    encoder: nn.Module,
    key: nn.Module | None,
    optimizer: torch.optim.Optimizer,
    queues: tuple[objectives.Queue, ...],
) -> None:
    """Rank 0 at the end of an epoch: its checkpoint (when chosen), the state to resume from
    (with the epoch's row in it), then its row: an epoch's row on disk means a rerun continues
    after that epoch, and a row lost to a kill between the two is written back from the state
    (`write_missing_row`)."""
    epoch = row["epoch"]
    if epoch in job.pretrain.embedded:
        _save(encoder.backbone.state_dict(), job.checkpoint(epoch), job.staging)
    state = {
        "epoch": epoch,
        "encoder": encoder.state_dict(),
        "key": key.state_dict() if key is not None else {},
        "optimizer": optimizer.state_dict(),
        "queues": [q.state() for q in queues],
        "row": row,
    }
    _save(state, job.state, job.staging)
    write_parquet_atomic(pa.Table.from_pylist([row]), job.epoch_row(epoch), job.staging)


def write_missing_row(job: PretrainJob) -> bool:
    """Write the last finished epoch's row from the state when a kill came between the two
    (the state is saved first). Returns whether a row was written."""
    start = finished_epochs(job)
    if not start or job.epoch_row(start).exists():
        return False
    row = torch.load(job.state, map_location="cpu", weights_only=True).get("row")
    if row is None:  # a state of older code, which wrote the row first
        return False
    write_parquet_atomic(pa.Table.from_pylist([row]), job.epoch_row(start), job.staging)
    return True


def train(job: PretrainJob, ctx: Context) -> None:
    """Train from the last finished epoch (or the start) to pretrain.epochs."""
    p = job.pretrain
    store.pull(job.root)  # a worker of another node: the split, and the state to resume from
    images = job.task.inputs(job.data)
    dense_loss = p.objective == "densecl"
    encoder = objectives.ContrastiveEncoder(
        job.task.network().requires_grad_(True),
        job.task.width,
        p.projection,
        dense_loss,
        generator(p.seed, "pretrain-heads"),
    )
    key = objectives.momentum_copy(encoder).to(ctx.device) if dense_loss else None
    queues = tuple(
        objectives.Queue(p.queue, p.projection, generator(p.seed, "pretrain-queue", i))
        for i in range(2)
    )
    start, optimizer_state = _restore(job, encoder, key, queues)
    for q in queues:
        q.keys = q.keys.to(ctx.device)
    if start == 0 and ctx.rank == 0 and 0 in p.embedded:
        _save(encoder.backbone.state_dict(), job.checkpoint(0), job.staging)
    model = ctx.wrap(encoder)
    optimizer = torch.optim.Adam(model.parameters(), lr=p.lr)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    steps = images.shape[0] // p.batch
    if steps == 0:
        raise ValueError(
            f"pretrain.batch: {p.batch} is larger than the pretraining split "
            f"({images.shape[0]} images)"
        )
    if start == 0 and dense_loss and p.queue_init == "keys":
        _fill_queues(job, ctx, key, queues, images)
    for epoch in range(start + 1, p.epochs + 1):
        started = time.perf_counter()
        model.train()
        loss_sum, seen, stale = _train_epoch(job, ctx, model, key, queues, optimizer, images, epoch)
        loss_sum, seen = ctx.total([loss_sum, float(seen)])
        seconds = time.perf_counter() - started
        row = {
            "encoder": job.task.family,
            "epoch": epoch,
            "objective": p.objective,
            "loss": loss_sum / seen,
            "images": int(seen),
            "steps": steps,
            "batch": p.batch,
            "workers": ctx.world_size,
            "device": ctx.device.type,
            "seconds": seconds,
            "images_per_second": seen / seconds,
            "lr": _lr(p, epoch * steps - 1, steps),
            "queue_staleness": stale,
        }
        if ctx.rank == 0:
            row.update(_retrieval(_unwrap(model), job, images, ctx.device))
            _finish_epoch(job, row, _unwrap(model), key, optimizer, queues)


def _train_epoch(
    job: PretrainJob,
    ctx: Context,
    model: nn.Module,
    key: nn.Module | None,
    queues: tuple[objectives.Queue, ...],
    optimizer: torch.optim.Optimizer,
    images: torch.Tensor,
    epoch: int,
) -> tuple[float, int, float | None]:
    """One epoch's steps on this worker: its share of every global batch of a seeded order.
    Returns the sum of its losses weighted by images, its images, and (DenseCL) the mean over
    steps of the share of the global queue that holds keys of the step's own images."""
    p = job.pretrain
    dense_loss = p.objective == "densecl"
    per_worker = p.batch // ctx.world_size
    order = torch.randperm(images.shape[0], generator=generator(p.seed, "pretrain", epoch))
    draw = generator(p.seed, "pretrain-views", epoch, ctx.rank)
    loss_sum, seen, stale = 0.0, 0, 0.0
    steps = images.shape[0] // p.batch
    for step in range(steps):
        lo = step * p.batch + ctx.rank * per_worker
        a, b, match = job.task.views(images[order[lo : lo + per_worker]], draw, dense_loss)
        a, b = a.to(ctx.device), b.to(ctx.device)
        for group in optimizer.param_groups:
            group["lr"] = _lr(p, (epoch - 1) * steps + step, steps)
        if dense_loss:
            loss, k_global, k_dense = objectives.densecl_loss(
                model, key, a, b, match, queues, p.temperature, p.lam
            )
        else:
            gather = ctx.gather_grad if ctx.world_size > 1 else None
            loss = objectives.nt_xent_loss(model, a, b, p.temperature, gather, ctx.rank)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if dense_loss:
            batch_ids = order[step * p.batch : (step + 1) * p.batch]  # every worker's, in order
            stale += queues[0].share_from(batch_ids)
            objectives.ema_update(key, _unwrap(model), p.momentum)
            queues[0].push(ctx.gather(k_global), batch_ids)
            queues[1].push(ctx.gather(k_dense), batch_ids)
        loss_sum += float(loss.detach()) * a.shape[0]
        seen += a.shape[0]
    return loss_sum, seen, (stale / steps if dense_loss else None)


def _lr(p: PretrainConfig, step: int, steps: int) -> float:
    """The learning rate of global step `step` (0-based) of `steps` an epoch."""
    return objectives.learning_rate(p.lr, step, p.epochs * steps, p.warmup, p.schedule)


@torch.no_grad()
def _fill_queues(
    job: PretrainJob,
    ctx: Context,
    key: nn.Module,
    queues: tuple[objectives.Queue, ...],
    images: torch.Tensor,
) -> None:
    """DenseCL's queues filled with real keys before the first step: the momentum encoder's
    keys of view 2 of the first `queue` images of a seeded order (whole global batches, so
    fewer when the split is smaller; the rest of the queue stays random), enqueued batch by
    batch as training enqueues them."""
    p = job.pretrain
    per_worker = p.batch // ctx.world_size
    order = torch.randperm(images.shape[0], generator=generator(p.seed, "pretrain-queue-fill"))
    draw = generator(p.seed, "pretrain-queue-fill-views", ctx.rank)
    for step in range(max(1, min(p.queue, images.shape[0]) // p.batch)):
        ids = order[step * p.batch : (step + 1) * p.batch]
        mine = ids[ctx.rank * per_worker : (ctx.rank + 1) * per_worker]
        _, view2, _ = job.task.views(images[mine], draw, False)
        k_global, k_dense = key(view2.to(ctx.device))
        queues[0].push(ctx.gather(k_global), ids)
        queues[1].push(ctx.gather(objectives.dense_queue_key(k_dense)), ids)


RETRIEVAL_IMAGES = 256  # the fixed images of the per-epoch retrieval


@torch.no_grad()
def _retrieval(
    encoder: objectives.ContrastiveEncoder,
    job: PretrainJob,
    images: torch.Tensor,
    device: torch.device,
) -> dict:
    """The objective's own retrieval after an epoch: on the first RETRIEVAL_IMAGES images of the
    pretraining split, each under the same two views every epoch, the share whose view-1 global
    embedding is nearest to its own view-2 embedding among all of theirs (the trained encoder
    on both views; chance 1 / images). They are images pretraining trains on, in views it draws
    afresh: a measure of what the objective learned, not of generalisation."""
    rows = images[: min(RETRIEVAL_IMAGES, images.shape[0])]
    gen = generator(job.pretrain.seed, "pretrain-retrieval-views")
    a, b, _ = job.task.views(rows, gen, False)
    was_training = encoder.training
    encoder.eval()
    top1 = objectives.positive_top1(encoder(a.to(device))[0], encoder(b.to(device))[0])
    encoder.train(was_training)
    return {"positive_top1": top1, "positive_chance": 1.0 / rows.shape[0]}


def epoch_rows(root: Path) -> pa.Table | None:
    """Every finished epoch's row, in order (None before the first)."""
    files = sorted((root / "epochs").glob("epoch=*.parquet"))
    if not files:
        return None
    tables = [pq.read_table(f) for f in files]  # epochs of older code lack later columns
    return pa.concat_tables(tables, promote_options="default").sort_by("epoch")
