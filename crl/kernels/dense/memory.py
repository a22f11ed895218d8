"""The stateful side of dense contrastive learning: a FIFO feature queue (MoCo / DenseCL) and the
momentum (EMA) update of a target encoder (docs/theory/statements.md C; Wang et al. CVPR 2021).
"""

from __future__ import annotations

import torch

from crl.kernels import _validate

__all__ = ["FeatureQueue", "momentum_update"]


class FeatureQueue(torch.nn.Module):
    """FIFO memory of past keys (MoCo / DenseCL queue), held in registered buffers.

    Slot order: counting every key ever enqueued from 0, key j is written to slot j mod size,
    so once the queue is full each enqueue overwrites the oldest keys. `tensor()` returns the
    filled slots in slot order (rows 0 .. len-1), which is chronological until the first wrap.
    """

    keys: torch.Tensor
    ptr: torch.Tensor
    filled: torch.Tensor

    def __init__(
        self,
        size: int,
        dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        _validate.at_least("size", size, 1)
        _validate.at_least("dim", dim, 1)
        self.register_buffer("keys", torch.zeros(size, dim, dtype=dtype, device=device))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.int64, device=device))
        self.register_buffer("filled", torch.zeros((), dtype=torch.int64, device=device))

    def __len__(self) -> int:
        return int(self.filled)

    @torch.no_grad()
    def enqueue(self, keys: torch.Tensor) -> None:
        """Write `keys` (detached) into the next slots, wrapping around past the end.

        Shape: keys (K, C) with C = dim; if K > size only the last `size` keys remain.
        """
        keys = _validate.floating("keys", keys)
        size, dim = self.keys.shape
        _validate.shape("keys", keys, f"(K, {dim})", keys.ndim == 2 and keys.shape[1] == dim)
        n = keys.shape[0]
        slots = (int(self.ptr) + torch.arange(n, device=self.keys.device)) % size  # (K,)
        self.keys[slots[-size:]] = keys[-size:].to(self.keys)
        self.ptr.fill_((int(self.ptr) + n) % size)
        self.filled.fill_(min(size, int(self.filled) + n))

    def tensor(self) -> torch.Tensor:
        """A detached copy of the filled slots, safe to use after later enqueues.

        Shape: -> (Q_filled, C).
        """
        return self.keys[: len(self)].detach().clone()


def momentum_update(online: torch.nn.Module, target: torch.nn.Module, momentum: float) -> None:
    """EMA of parameters, in place without gradient: target <- m target + (1 - m) online.

    Parameters are matched by name and must agree in name and shape; buffers are not touched
    (MoCo / DenseCL keep separate batch-norm statistics in the target encoder).
    """
    if isinstance(momentum, bool) or not (
        isinstance(momentum, (int, float)) and 0.0 <= momentum <= 1.0
    ):
        raise ValueError(f"momentum={momentum!r}: expected a number in [0, 1]")
    src, dst = dict(online.named_parameters()), dict(target.named_parameters())
    if src.keys() != dst.keys():
        raise ValueError(
            f"target has parameters {sorted(dst)}: expected the names of online {sorted(src)}"
        )
    for name, p in src.items():
        q = dst[name]
        _validate.shape(
            f"target.{name}", q, f"{tuple(p.shape)} (shape of online.{name})", q.shape == p.shape
        )
    with torch.no_grad():
        for name, p in src.items():
            dst[name].mul_(momentum).add_(p.to(dst[name]), alpha=1.0 - float(momentum))
