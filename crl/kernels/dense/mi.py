"""Prop. D9 of docs/theory/dense-bounds.md: a held-out lower confidence bound on the mutual
information I(U; V) from the dense InfoNCE loss, valid only when the negatives counted in
N = 1 + m are external and drawn i.i.d. from the positive's marginal; the sampling that makes it
valid is recorded beside it, and it never exceeds log(1 + m).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from crl.kernels import _validate
from crl.kernels.dense.bounds import dense_range

__all__ = ["NEGATIVE_LAWS", "MiBound", "mi_lcb"]

NEGATIVE_LAWS = ("marginal", "pooled", "in_image")


@dataclass(frozen=True)
class MiBound:
    """Prop. D9 on held-out images. estimate = mean_i (log(1+m) - loss_i) <= ceiling <= log(1+m);
    lcb = estimate - margin (one-sided, level delta); interval = [estimate - w, min(estimate + w,
    ceiling)] with w Hoeffding at delta/2 per side (its upper end is not an upper bound on I);
    target: what lcb bounds ("I(U;V)" or "I(U;V) + KL(p_V||q)"); sampling: what makes it valid."""

    estimate: float
    lcb: float
    margin: float
    method: str
    interval: tuple[float, float]
    ceiling: float
    saturated: bool
    target: str
    sampling: str


def mi_lcb(
    losses: torch.Tensor,
    m: int,
    R: float,
    T: float,
    delta: float,
    negatives: str = "marginal",
    in_image: int = 0,
    method: str = "hoeffding",
) -> MiBound:
    """Prop. D9: I(U;V) >= log(1+m) - E loss, counting in N = 1 + m ONLY the m external negatives.

    losses: one value per held-out image (the image's mean over positions), each position with m
    fresh external negatives in its denominator, plus `in_image` other positions of the same view
    if the loss keeps them (conservative: they raise the loss, and are never counted in N).
    negatives: the law of the m counted negatives. "marginal": i.i.d. from the positive's marginal
    p_V, independent of the pair -> a bound on I. "pooled" (DenseCL's queue of pooled embeddings)
    or any other law q -> labelled: it bounds I + KL(p_V||q), not I. "in_image": refused, since
    counting dependent negatives in N can overshoot I (docs/theory/dense-bounds.md section 6,
    rule 1).
    method: "hoeffding" (margin B sqrt(ln(1/delta)/(2n))) or "bernstein" (Maurer-Pontil, Thm 4).
    The range B is Lemma D3's at N = m + in_image. Shape: losses (n_test,).
    """
    _validate.choice("negatives", negatives, NEGATIVE_LAWS)
    if negatives == "in_image":
        raise ValueError(
            "negatives='in_image': expected 'marginal' or 'pooled'; in-image negatives depend on "
            "the pair and must not be counted in N (keep them in the loss via in_image=...)"
        )
    _validate.choice("method", method, ("hoeffding", "bernstein"))
    m, k = _validate.at_least("m", m, 1), _validate.at_least("in_image", in_image, 0)
    delta = _validate.open_unit("delta", delta)
    x = _validate.float_tensor("losses", losses, 1, "(n_test,)").to(torch.float64)
    n = x.shape[0]
    lo, B = dense_range(m + k, m + k, R, T)
    if float(x.min()) < lo - 1e-9 or float(x.max()) > lo + B + 1e-9:
        raise ValueError(
            f"losses span [{float(x.min()):.6g}, {float(x.max()):.6g}]: expected values in "
            f"[{lo:.6g}, {lo + B:.6g}] (Lemma D3 at N = m + in_image; norms <= R, scores / T?)"
        )
    log_n = math.log1p(m)
    y = log_n - x  # (n,)
    est, ceiling = float(y.mean()), log_n - lo
    if method == "hoeffding":
        margin = B * math.sqrt(math.log(1 / delta) / (2 * n))
    else:
        n = _validate.at_least("losses (rows)", n, 2)
        var = float(y.var(correction=1))
        log2d = math.log(2 / delta)
        margin = math.sqrt(2 * var * log2d / n) + 7 * B * log2d / (3 * (n - 1))
    w = B * math.sqrt(math.log(2 / delta) / (2 * n))
    law = (
        "i.i.d. from the positive's marginal p_V, independent of the pair"
        if negatives == "marginal"
        else "from a law q other than p_V (DenseCL's pooled queue is one)"
    )
    sampling = (
        f"{n} held-out images independent of the trained head; per position {m} fresh external "
        f"negatives {law}, counted in N = {m + 1}"
        + (f"; {k} in-image negatives kept in the loss, not counted" if k else "")
    )
    target = "I(U;V)" if negatives == "marginal" else "I(U;V) + KL(p_V||q)"
    interval = (est - w, min(est + w, ceiling))
    lcb = min(est - margin, ceiling)
    return MiBound(
        est, lcb, margin, method, interval, ceiling, est + w >= ceiling, target, sampling
    )
