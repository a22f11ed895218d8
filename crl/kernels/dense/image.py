"""The per-image dense loss h of docs/theory/dense-bounds.md (D4) with a linear head, and
DenseCL's combined objective.

An image has K1 query positions (view 1) and K2 key positions (view 2), a one-to-one-or-less
correspondence match (a -> b, or -1 for no positive), and m external negatives, its own (regime
scrl) or one queue shared by every image (sscrl). With w_a = 1 / |A| (A: the matched positions),
psi_ab = log(1 + sum_{u in N(a)} e^{(s_au - s_ab)/T}) and h = sum_{a in A} w_a psi_a(a), where
N(a) = the keys of view 2 other than b plus the external negatives ("own"), or the external
negatives only ("ext", DenseCL). DenseCL's head: cross-entropy on [pos, neg] / T, no factor T.
The global branch is the same loss on pooled features with K1 = K2 = 1 and "ext" negatives.
"""

from __future__ import annotations

import torch

from crl.kernels import _validate

__all__ = ["NEGATIVE_SETS", "combined_loss", "image_losses", "matched"]

NEGATIVE_SETS = ("own", "ext")


def matched(match: torch.Tensor) -> torch.Tensor:
    """Which images have at least one matched position (A non-empty). Shape: (n, K1) -> (n,)."""
    return (match >= 0).any(dim=1)


def image_losses(
    q: torch.Tensor,
    k: torch.Tensor,
    ext: torch.Tensor,
    match: torch.Tensor,
    negatives: str,
    temperature: float,
) -> torch.Tensor:
    """h of every image (D4), in the dtype of q.

    Shape: q (n, K1, d) queries W phi_a(X1), k (n, K2, d) keys W phi_b(X2), ext (n, m, d) each
    image's external negatives or (m, d) one shared queue, match (n, K1) int64 in [-1, K2)
    with every image matched somewhere -> (n,).
    """
    _validate.choice("negatives", negatives, NEGATIVE_SETS)
    T = _validate.positive("temperature", temperature)
    q, k, ext = (_validate.floating(name, x) for name, x in (("q", q), ("k", k), ("ext", ext)))
    n, k1, d = q.shape
    _validate.shape("k", k, f"({n}, K2, {d})", k.ndim == 3 and k.shape[0] == n and k.shape[2] == d)
    shared = ext.ndim == 2
    ok = (ext.ndim == 2 and ext.shape[1] == d) or (ext.ndim == 3 and ext.shape[::2] == (n, d))
    _validate.shape("ext", ext, f"({n}, m, {d}) or (m, {d})", ok and ext.shape[-2] >= 1)
    ok = match.shape == (n, k1) and match.dtype == torch.int64
    _validate.shape("match", match, f"({n}, {k1}) int64", ok)
    valid = match >= 0  # (n, K1)
    if not bool(matched(match).all()):
        raise ValueError("match has an image with no matched position: discard it first (D3)")
    b = match.clamp(min=0)  # (n, K1)
    keys_b = torch.gather(k, 1, b[:, :, None].expand(-1, -1, d))  # (n, K1, d)
    pos = (q * keys_b).sum(-1) / T  # (n, K1) s_ab / T
    s_ext = (q @ ext.T if shared else q @ ext.transpose(1, 2)) / T  # (n, K1, m)
    if negatives == "own":
        s_keys = q @ k.transpose(1, 2) / T  # (n, K1, K2): the positive b and the other keys
        logits = torch.cat([s_keys, s_ext], dim=2)  # (n, K1, K2 + m)
    else:
        logits = torch.cat([pos[:, :, None], s_ext], dim=2)  # (n, K1, 1 + m)
    psi = torch.logsumexp(logits, dim=2) - pos  # (n, K1)
    weights = valid.to(psi.dtype) / valid.sum(dim=1, keepdim=True).to(psi.dtype)  # w_a
    return (weights * psi).sum(dim=1)


def combined_loss(dense: torch.Tensor, global_: torch.Tensor | None, lam: float) -> torch.Tensor:
    """DenseCL's (1 - lambda) L_global + lambda L_dense per image. Shape: (n,), (n,) -> (n,)."""
    if not (isinstance(lam, (int, float)) and 0.0 <= lam <= 1.0):
        raise ValueError(f"lam={lam!r}: expected a number in [0, 1]")
    if lam == 1.0 or global_ is None:
        if lam != 1.0:
            raise ValueError(f"lam={lam!r} < 1 needs the global branch's losses")
        return dense
    return (1.0 - lam) * global_ + lam * dense
