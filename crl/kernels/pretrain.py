"""Contrastive pretraining objectives of an encoder: SimCLR's NT-Xent and DenseCL.

A dense backbone maps images (N, c, S, S) to K = grid^2 position features (N, K, C); a global
encoder (the grid's small_cnn) maps inputs to (N, C), which NT-Xent trains alone. A projection
network on top gives a global embedding (the pooled features through an MLP, C -> C -> D) and,
for DenseCL, a dense one (the same kind of MLP on every position), each normalised to the unit
sphere. The projections are discarded after pretraining: the cells see the backbone alone.

* NT-Xent (Chen et al. 2020): crl.kernels.losses.nt_xent on the global embeddings of two views
  of a batch (in-batch negatives; over several workers, the global batch: `nt_xent_loss`).
* DenseCL (Wang et al. 2021): queries from the trained encoder on view 1, keys from a momentum
  (exponential moving average) copy on view 2, and two queues of past keys as negatives;
  (1 - lam) L_global + lam L_dense, each branch the per-image loss h of
  crl.kernels.dense.image (regime sscrl: one queue shared by every image; negatives "ext"). The
  dense positive of a view-1 position is its geometric correspondent in view 2 (from the crops'
  boxes) where DenseCL takes the argmax of the backbone's similarities; an image whose views do
  not overlap has no dense positive and is left out of the step's loss.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from crl.kernels import losses
from crl.kernels.dense import image as dense_image

__all__ = [
    "ContrastiveEncoder",
    "Queue",
    "densecl_loss",
    "dense_queue_key",
    "ema_update",
    "learning_rate",
    "nt_xent_loss",
    "nt_xent_rows",
    "positive_top1",
]


def _mlp(width: int, out: int, gen: torch.Generator) -> nn.Sequential:
    """Linear, ReLU, Linear; weights and biases uniform in +-1/sqrt(fan in) (torch's default
    law) drawn from `gen`, never from the global generator."""
    skip = torch.nn.utils.skip_init  # no draw from the global generator
    layers = [skip(nn.Linear, width, width), nn.ReLU(), skip(nn.Linear, width, out)]
    with torch.no_grad():
        for layer in (layers[0], layers[2]):
            bound = layer.in_features**-0.5
            for param in (layer.weight, layer.bias):
                param.copy_((torch.rand(param.shape, generator=gen) * 2 - 1) * bound)
    return nn.Sequential(*layers)


class ContrastiveEncoder(nn.Module):
    """A backbone (images -> (N, K, C) position features, or (N, C) global features: no dense
    head then) with projection heads.

    Shape: forward(images (N, c, S, S)) -> global (N, D) unit rows, dense (N, K, D) unit rows
    (None without a dense head). The heads' initial weights come from `gen`.
    """

    def __init__(
        self,
        backbone: nn.Module,
        channels: int,
        projection: int,
        dense: bool,
        gen: torch.Generator,
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.global_head = _mlp(channels, projection, gen)
        self.dense_head = _mlp(channels, projection, gen) if dense else None

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        features = self.backbone(images)  # (N, K, C), or (N, C) from a global encoder
        pooled = features if features.ndim == 2 else features.mean(dim=1)
        z = F.normalize(self.global_head(pooled), dim=1)
        if self.dense_head is None:
            return z, None
        return z, F.normalize(self.dense_head(features), dim=2)


def momentum_copy(encoder: ContrastiveEncoder) -> ContrastiveEncoder:
    """The key encoder of DenseCL: a copy that gradients never reach."""
    key = copy.deepcopy(encoder)
    key.requires_grad_(False)
    return key


@torch.no_grad()
def ema_update(key: nn.Module, query: nn.Module, momentum: float) -> None:
    """key <- momentum * key + (1 - momentum) * query, parameter by parameter."""
    for k, q in zip(key.parameters(), query.parameters(), strict=True):
        k.mul_(momentum).add_(q.detach(), alpha=1.0 - momentum)


class Queue:
    """A first-in first-out queue of `size` unit keys of dimension `dim` (DenseCL/MoCo),
    started from random unit vectors drawn from `gen`.

    Shape: keys (size, dim); push(new (b, dim)) overwrites the oldest b rows (b <= size).
    """

    def __init__(self, size: int, dim: int, gen: torch.Generator) -> None:
        self.keys = F.normalize(torch.randn(size, dim, generator=gen), dim=1)
        self.ids = torch.full((size,), -1, dtype=torch.int64)  # each key's image; -1: initial
        self.pointer = 0

    def push(self, new: torch.Tensor, ids: torch.Tensor | None = None) -> None:
        """Enqueue `new` (b, dim), the keys of the images `ids` (b,) (unknown: -1)."""
        new = new.detach().to(self.keys.device, self.keys.dtype)[: self.keys.shape[0]]
        rows = (self.pointer + torch.arange(new.shape[0], device=self.keys.device)) % len(self.keys)
        self.keys[rows] = new
        given = torch.full((new.shape[0],), -1) if ids is None else ids[: new.shape[0]].cpu()
        self.ids[rows.cpu()] = given.to(torch.int64)
        self.pointer = int((self.pointer + new.shape[0]) % len(self.keys))

    def share_from(self, ids: torch.Tensor) -> float:
        """The share of the queue's keys that are keys of the images `ids`: for the images of a
        batch, the stale copies of their own positives that the queue offers as negatives."""
        return float(torch.isin(self.ids, ids.cpu()).double().mean())

    def state(self) -> dict:
        return {"keys": self.keys.cpu(), "pointer": self.pointer, "ids": self.ids.clone()}

    def load(self, state: dict) -> None:
        self.keys = state["keys"].to(self.keys.device)
        self.pointer = int(state["pointer"])
        self.ids = state.get("ids", torch.full((len(self.keys),), -1, dtype=torch.int64))


def learning_rate(peak: float, step: int, total: int, warmup: float, schedule: str) -> float:
    """The learning rate of step `step` (0-based) of `total`: linear warm-up over the first
    ceil(warmup * total) steps (peak * (step + 1) / warm), then `peak` ("constant") or a half
    cosine from `peak` at the end of the warm-up to 0 after the last step ("cosine")."""
    if not 0 <= step < total:
        raise ValueError(f"step {step} is outside 0..{total - 1}")
    warm = math.ceil(warmup * total)
    if step < warm:
        return peak * (step + 1) / warm
    if schedule == "constant":
        return peak
    if schedule != "cosine":
        raise ValueError(f"schedule: unknown {schedule!r}")
    return peak * 0.5 * (1.0 + math.cos(math.pi * (step - warm) / (total - warm)))


def positive_top1(queries: torch.Tensor, keys: torch.Tensor) -> float:
    """The share of queries whose most similar key (inner product) is their own positive, the
    key of the same row, among all the rows' keys: the objective's own retrieval, chance 1/B.
    Shape: queries, keys (B, D) -> float."""
    best = (queries @ keys.T).argmax(dim=1)  # (B,)
    return float((best == torch.arange(queries.shape[0], device=queries.device)).double().mean())


def nt_xent_loss(
    encoder: nn.Module,
    view1: torch.Tensor,
    view2: torch.Tensor,
    temperature: float,
    gather: Callable[[torch.Tensor], torch.Tensor] | None = None,
    rank: int = 0,
) -> torch.Tensor:
    """SimCLR's loss on one batch of two views. Shape: (B, c, s, s) each, B >= 2 -> ().

    With `gather` (every worker's rows in rank order, differentiable; each worker holds B) the
    contrast set is the global batch: this worker's loss is the mean over its own 2B anchors
    (`rank`'s rows) against all 2 W B candidates. Averaging the workers' gradients (DDP) then
    gives the gradient of the global batch's NT-Xent, since the gather's backward sums each
    row's gradient onto the worker that owns it."""
    z1, _ = encoder(view1)
    z2, _ = encoder(view2)
    if gather is None:
        return losses.nt_xent(z1, z2, temperature)
    rows = rank * z1.shape[0] + torch.arange(z1.shape[0], device=z1.device)
    return nt_xent_rows(gather(z1), gather(z2), rows, temperature)


def nt_xent_rows(
    z1: torch.Tensor, z2: torch.Tensor, rows: torch.Tensor, temperature: float
) -> torch.Tensor:
    """NT-Xent (crl.kernels.losses.nt_xent) averaged over the anchors `rows` of view 1 and the
    same rows of view 2 only, each against every other row of both views. With every row it is
    nt_xent itself. Shape: z1, z2 (N, D); rows (b,) int64 -> ()."""
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=1)  # (2N, D)
    anchors = torch.cat([rows, rows + z1.shape[0]])  # (2b,)
    logits = (z[anchors] @ z.T) / temperature  # (2b, 2N)
    logits[torch.arange(anchors.shape[0], device=z.device), anchors] = -math.inf
    partner = (anchors + z1.shape[0]) % z.shape[0]
    return F.cross_entropy(logits, partner)


def densecl_loss(
    encoder: nn.Module,
    key: nn.Module,
    view1: torch.Tensor,
    view2: torch.Tensor,
    match: torch.Tensor,
    queues: tuple[Queue, Queue],
    temperature: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DenseCL's loss on one batch; returns (loss, global keys, dense keys to enqueue).

    The dense key an image enqueues is `dense_queue_key` of its view-2 dense keys.
    Shape: views (B, c, s, s), match (B, K) int64 (-1: no correspondent) with some image
    matched -> (), (B, D), (B, D).
    """
    kept = torch.nonzero((match >= 0).any(dim=1)).squeeze(1).to(view1.device)
    if kept.numel() == 0:
        raise ValueError("no image of the batch has overlapping views")
    match = match.to(view1.device)[kept]
    q_global, q_dense = encoder(view1[kept])
    with torch.no_grad():  # every image's keys: each worker enqueues as many
        k_global, k_dense = key(view2)
    zero = torch.zeros(kept.numel(), 1, dtype=torch.int64, device=view1.device)
    glob = dense_image.image_losses(
        q_global[:, None], k_global[kept, None], queues[0].keys, zero, "ext", temperature
    )
    dense = dense_image.image_losses(
        q_dense, k_dense[kept], queues[1].keys, match, "ext", temperature
    )
    loss = dense_image.combined_loss(dense, glob, lam).mean()
    return loss, k_global, dense_queue_key(k_dense)


def dense_queue_key(k_dense: torch.Tensor) -> torch.Tensor:
    """The dense key an image enqueues: the normalised mean of its dense keys (DenseCL's
    choice). Shape: (B, K, D) -> (B, D)."""
    return F.normalize(k_dense.mean(dim=1), dim=1)
