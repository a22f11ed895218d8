"""Contrastive loss kernels: Saunshi et al. 2019 (docs/theory/statements.md A), Li et al. 2026
(docs/theory/statements.md B), NT-Xent.

Every kernel is a pure function of torch tensors; it runs on the device of its inputs and is
differentiable. Exponentials are only taken inside log-sum-exps, so float32 inputs with
|score / T| up to 1e4 give finite values and finite gradients.

Paths by size. Where a kernel has a `path`, "auto" runs the formulation a user writes in plain
torch (autograd through a few ops, differentiable twice) up to a size where its fixed costs
dominate, and above it a fused kernel that computes its gradient in the forward pass (fewer
passes, less memory, differentiable once; bench/kernels_scores.py and
bench/kernels_losses.py measure both). Fused means over anchors are accumulated in float64 and
cast back to the input dtype; plain means are torch's, in the input dtype, over at most
PLAIN_MAX_SCORES scores or PLAIN_MAX_ROWS rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from crl.kernels import _validate
from crl.kernels.fused_contrast import nt_xent_blocked
from crl.kernels.fused_scores import BLOCK_SCORES, log_sum_exp_loss, shared_log_sum_exp_loss

__all__ = [
    "BINARY_LOSSES",
    "LN2",
    "NT_XENT_PATHS",
    "PLAIN_MAX_ROWS",
    "PLAIN_MAX_SCORES",
    "REDUCTIONS",
    "SCORE_PATHS",
    "SHARED_LOSSES",
    "SHARED_PATHS",
    "binary",
    "hinge",
    "info_nce",
    "k_negative",
    "k_negative_margins",
    "logistic",
    "lse_risk",
    "nt_xent",
    "one_negative",
    "scores_own",
    "scores_shared",
    "shared_negatives_loss",
    "triplet_score",
]

LN2 = math.log(2.0)
BINARY_LOSSES = ("hinge", "logistic")  # the one-negative losses of Saunshi et al.
REDUCTIONS = ("mean", "none")
NT_XENT_PATHS = ("auto", "plain", "blocked")
PLAIN_MAX_ROWS = 256  # nt_xent "auto": plain up to this many rows (bench/kernels_losses.py)
SCORE_PATHS = ("auto", "plain", "fused")
PLAIN_MAX_SCORES = 65536  # score losses "auto": plain up to n m scores (bench/kernels_scores.py)
SHARED_LOSSES = ("info_nce", "lse")
SHARED_PATHS = ("auto", "scores", "blocked")


def _fused(path: str, scores: torch.Tensor) -> bool:
    """Whether a score loss on `scores` (n, m) runs fused: `path` "fused", or "auto" above
    PLAIN_MAX_SCORES scores."""
    _validate.choice("path", path, SCORE_PATHS)
    return path == "fused" or (path == "auto" and scores.numel() > PLAIN_MAX_SCORES)


def _floating_pair(a: object, b: object) -> bool:
    """Whether a and b are floating-point tensors (the checks' hot path)."""
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.is_floating_point()
        and b.is_floating_point()
    )


def _valid_scores(pos: object, neg: object) -> bool:
    """Whether pos (n,) and neg (n, m) are floating tensors with n, m >= 1."""
    return (
        _floating_pair(pos, neg)
        and pos.dim() == 1
        and neg.dim() == 2
        and 1 <= pos.shape[0] == neg.shape[0]
        and neg.shape[1] >= 1
    )


def _pos_neg(pos: object, neg: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate scores pos (n,) and neg (n, m) with n >= 1, m >= 1."""
    if _valid_scores(pos, neg):  # one expression on the hot path; the messages below
        return pos, neg  # type: ignore[return-value]
    pos_t, neg_t = _validate.floating("pos", pos), _validate.floating("neg", neg)
    _validate.shape("pos", pos_t, "(n,) with n >= 1", pos_t.ndim == 1 and pos_t.shape[0] >= 1)
    _validate.shape(
        "neg",
        neg_t,
        f"(n, m) with n = {pos_t.shape[0]} (rows of pos) and m >= 1",
        neg_t.ndim == 2 and neg_t.shape[0] == pos_t.shape[0] and neg_t.shape[1] >= 1,
    )
    return pos_t, neg_t


def hinge(t: torch.Tensor) -> torch.Tensor:
    """Hinge loss l_h(t) = max(1 + t, 0), elementwise (docs/theory/statements.md A).

    Shape: t (*) -> (*).
    """
    return torch.clamp_min(1.0 + _validate.floating("t", t), 0.0)


def logistic(t: torch.Tensor) -> torch.Tensor:
    """Logistic loss l_log(t) = log2(1 + e^t) = logaddexp(t, 0) / ln 2, elementwise
    (docs/theory/statements.md A).

    `logaddexp` is exact at every t (torch's softplus switches to t above t = 20, an error of
    e^-20) and its gradient is sigmoid(t).

    Shape: t (*) -> (*).
    """
    t = _validate.floating("t", t)
    return torch.logaddexp(t, torch.zeros_like(t)) / LN2


def binary(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The one-negative loss called `name`: `hinge` or `logistic` (docs/theory/statements.md A)."""
    return {"hinge": hinge, "logistic": logistic}[_validate.choice("loss", name, BINARY_LOSSES)]


def triplet_score(fx: torch.Tensor, fpos: torch.Tensor, fneg: torch.Tensor) -> torch.Tensor:
    """Saunshi score q_f(x, x+, x-) = f(x)^T (f(x-) - f(x+)) (docs/theory/statements.md A).

    Shape: fx (n, d), fpos (n, d), fneg (n, d) -> (n,).
    """
    fx = _validate.floating("fx", fx)
    _validate.shape("fx", fx, "(n, d)", fx.ndim == 2)
    for name, value in (("fpos", fpos), ("fneg", fneg)):
        t = _validate.floating(name, value)
        _validate.shape(name, t, f"{tuple(fx.shape)} (shape of fx)", t.shape == fx.shape)
    return (fx * (fneg - fpos)).sum(dim=1)  # an einsum here is 4-20x slower forward + backward


def one_negative(q: torch.Tensor, loss: str = "hinge") -> torch.Tensor:
    """Per-triplet loss l(q) for the one-negative score q, l = hinge or logistic
    (docs/theory/statements.md A).

    Shape: q (n,) -> (n,).
    """
    _validate.choice("loss", loss, BINARY_LOSSES)
    q = _validate.floating("q", q)
    _validate.shape("q", q, "(n,)", q.ndim == 1)
    return hinge(q) if loss == "hinge" else logistic(q)


def k_negative(v: torch.Tensor, loss: str = "hinge", path: str = "auto") -> torch.Tensor:
    """Saunshi k-negative loss (Sec. 6) from margins v_i = f(x)^T (f(x+) - f(x_i-)).

    hinge: max(0, 1 + max_i(-v_i)); logistic: log2(1 + sum_i exp(-v_i)), computed as
    logsumexp over the row [0, -v_1, ..., -v_k] divided by ln 2. For k = 1 this equals
    `one_negative(-v[:, 0], loss)`. path (logistic only): "plain" (the cross-entropy of that
    row against its first entry, through autograd), "fused" (crl.kernels.fused_scores) or
    "auto": plain up to PLAIN_MAX_SCORES margins n k, fused above.

    Shape: v (n, k) with k >= 1 -> (n,).
    """
    _validate.choice("loss", loss, BINARY_LOSSES)
    v = _validate.floating("v", v)
    _validate.shape("v", v, "(n, k) with k >= 1", v.ndim == 2 and v.shape[1] >= 1)
    fused = _fused(path, v)
    if loss == "hinge":
        return torch.clamp_min(1.0 - v.amin(dim=1), 0.0)
    if fused:  # logits (v - 0) / -1 = -v
        return log_sum_exp_loss(None, v, -1.0, True, 1.0 / LN2)
    logits = torch.cat([v.new_zeros(v.shape[0], 1), -v], dim=1)  # (n, 1 + k): [0, -v]
    target = torch.zeros(v.shape[0], dtype=torch.long, device=v.device)  # (n,)
    # cross-entropy against the zero logit is logsumexp([0, -v]): one fused log-softmax
    return F.cross_entropy(logits, target, reduction="none") / LN2  # (n,)


def k_negative_margins(fx: torch.Tensor, fpos: torch.Tensor, fneg: torch.Tensor) -> torch.Tensor:
    """Margins v_ij = f(x_i)^T (f(x_i+) - f(x_ij-)) for `k_negative`.

    Shape: fx (n, d), fpos (n, d), fneg (n, k, d) own negatives per anchor or (k, d) negatives
    shared by all anchors -> (n, k).
    """
    fx, fpos, fneg = (
        _validate.floating("fx", fx),
        _validate.floating("fpos", fpos),
        _validate.floating("fneg", fneg),
    )
    _validate.shape("fx", fx, "(n, d)", fx.ndim == 2)
    n, d = fx.shape
    _validate.shape("fpos", fpos, f"({n}, {d}) (shape of fx)", fpos.shape == fx.shape)
    ok = (fneg.ndim == 3 and fneg.shape[0] == n and fneg.shape[2] == d) or (
        fneg.ndim == 2 and fneg.shape[1] == d
    )
    _validate.shape(
        "fneg", fneg, f"({n}, k, {d}) or (k, {d}) with k >= 1", ok and fneg.shape[-2] >= 1
    )
    pos = (fx * fpos).sum(dim=1)  # (n,); an einsum is 4-20x slower forward + backward
    return pos[:, None] - (scores_own(fx, fneg) if fneg.ndim == 3 else scores_shared(fx, fneg))


def scores_own(fx: torch.Tensor, fneg: torch.Tensor) -> torch.Tensor:
    """SCRL negative scores s_ij = f(x_i)^T f(x_ij-), each anchor with its own negatives.

    Shape: fx (n, d), fneg (n, m, d) -> (n, m).
    """
    fx, fneg = _validate.floating("fx", fx), _validate.floating("fneg", fneg)
    _validate.shape("fx", fx, "(n, d)", fx.ndim == 2)
    n, d = fx.shape
    _validate.shape(
        "fneg",
        fneg,
        f"({n}, m, {d}) with m >= 1",
        fneg.ndim == 3 and fneg.shape[0] == n and fneg.shape[1] >= 1 and fneg.shape[2] == d,
    )
    # fneg first: its gradient then comes back in fneg's own layout (no transposed copy);
    # bmm rather than the same einsum: 3-4% faster forward + backward at n m d = 2^19
    return torch.bmm(fneg, fx[:, :, None]).squeeze(2)


def scores_shared(fx: torch.Tensor, fneg: torch.Tensor) -> torch.Tensor:
    """SSCRL negative scores s_ij = f(x_i)^T f(y_j-), one negative set shared by all anchors.

    Shape: fx (n, d), fneg (m, d) -> (n, m).
    """
    if (  # one expression on the hot path; the messages below
        _floating_pair(fx, fneg)
        and fx.dim() == 2
        and fneg.dim() == 2
        and fneg.shape[0] >= 1
        and fneg.shape[1] == fx.shape[1]
    ):
        return fx @ fneg.T
    fx, fneg = _validate.floating("fx", fx), _validate.floating("fneg", fneg)
    _validate.shape("fx", fx, "(n, d)", fx.ndim == 2)
    d = fx.shape[1]
    _validate.shape(
        "fneg",
        fneg,
        f"(m, {d}) with m >= 1",
        fneg.ndim == 2 and fneg.shape[0] >= 1 and fneg.shape[1] == d,
    )
    return fx @ fneg.T


def lse_risk(
    pos: torch.Tensor,
    neg: torch.Tensor,
    temperature: float,
    reduction: str = "mean",
    path: str = "auto",
) -> torch.Tensor:
    """Li et al. empirical LSE risk (docs/theory/statements.md B), SCRL and SSCRL alike.

    Per anchor: T log( (1/m) sum_j exp((neg_ij - pos_i) / T) ), i.e. T (logsumexp_j(D_ij / T)
    - log m) with D_ij = Delta(x_i, y_i, y'_ij) = neg_ij - pos_i. The positive is NOT in the
    denominator (compare `info_nce`). `reduction="mean"` gives Lhat(s) = (1/n) sum_i.

    path: "plain" (`T (logsumexp((neg - pos) / T) - log m)` through autograd), "fused"
    (crl.kernels.fused_scores) or "auto": plain up to PLAIN_MAX_SCORES scores n m, fused above.

    Shape: pos (n,), neg (n, m) -> () for "mean", (n,) for "none".
    """
    _validate.choice("reduction", reduction, REDUCTIONS)
    T = _validate.positive("temperature", temperature)
    pos, neg = _pos_neg(pos, neg)
    log_m = math.log(neg.shape[1])
    if _fused(path, neg):
        return log_sum_exp_loss(pos, neg, T, False, T, log_m, mean=reduction == "mean")
    per_anchor = T * (torch.logsumexp((neg - pos[:, None]) / T, dim=1) - log_m)  # (n,)
    return per_anchor.mean() if reduction == "mean" else per_anchor


def info_nce(
    pos: torch.Tensor,
    neg: torch.Tensor,
    temperature: float,
    reduction: str = "mean",
    path: str = "auto",
) -> torch.Tensor:
    """InfoNCE: per anchor log(1 + sum_j exp((neg_ij - pos_i) / T)) (docs/theory/statements.md
    sections B and C).

    Equals -log( e^{pos/T} / (e^{pos/T} + sum_j e^{neg_j/T}) ): the positive is in the
    denominator and there is no T factor outside.

    path: "plain" (`F.cross_entropy` of the logits [pos, neg] / T against class 0), "fused"
    (crl.kernels.fused_scores, on (neg - pos) / T) or "auto": plain up to PLAIN_MAX_SCORES
    scores n m, fused above.

    Shape: pos (n,), neg (n, m) -> () for "mean", (n,) for "none".
    """
    _validate.choice("reduction", reduction, REDUCTIONS)
    T = _validate.positive("temperature", temperature)
    pos, neg = _pos_neg(pos, neg)
    if _fused(path, neg):
        return log_sum_exp_loss(pos, neg, T, True, mean=reduction == "mean")
    logits = torch.cat([pos[:, None], neg], dim=1) / T  # (n, 1 + m), the positive in column 0
    target = torch.zeros(neg.shape[0], dtype=torch.long, device=neg.device)  # (n,)
    return F.cross_entropy(logits, target, reduction=reduction)


def shared_negatives_loss(
    fx: torch.Tensor,
    fpos: torch.Tensor,
    fneg: torch.Tensor,
    temperature: float,
    loss: str = "info_nce",
    path: str = "auto",
) -> torch.Tensor:
    """InfoNCE or the LSE risk of anchors with negatives shared by all of them (SSCRL, a MoCo
    queue), from the features, averaged over anchors.

    The value is `info_nce(pos, scores_shared(fx, fneg), T)` (loss "info_nce") or `lse_risk(...)`
    (loss "lse") with pos_i = fx_i . fpos_i. path: "scores" (exactly that: the n x m scores at
    once), "blocked" (crl.kernels.fused_scores: row blocks of about 2^22 scores, the gradient of
    fx, fpos and fneg computed in the same pass, memory O(block x m), differentiable once) or
    "auto": "blocked" when the scores exceed one block (n m > 2^22) and outnumber the features
    (m > d), else "scores" (whose kernels choose their own path by size): with few negatives
    the blocked pass's n x d work costs more than the scores it saves (blocked / scores time at
    n = 65536, d = 128: 1.18 at m = 16, 1.05 at m = 64, 0.76 at m = 256). A fneg that does not
    require grad (a queue) gets none and costs no matmul.

    Shape: fx (n, d), fpos (n, d), fneg (m, d) with n, m, d >= 1 -> ().
    """
    T = _validate.positive("temperature", temperature)
    _validate.choice("loss", loss, SHARED_LOSSES)
    _validate.choice("path", path, SHARED_PATHS)
    fx, fpos, fneg = (
        _validate.floating(k, v) for k, v in (("fx", fx), ("fpos", fpos), ("fneg", fneg))
    )
    _validate.shape("fx", fx, "(n, d) with n, d >= 1", fx.ndim == 2 and fx.numel() > 0)
    n, d = fx.shape
    _validate.shape("fpos", fpos, f"({n}, {d}) (shape of fx)", fpos.shape == fx.shape)
    _validate.shape(
        "fneg",
        fneg,
        f"(m, {d}) with m >= 1",
        fneg.ndim == 2 and fneg.shape[0] >= 1 and fneg.shape[1] == d,
    )
    for name, t in (("fpos", fpos), ("fneg", fneg)):
        if t.dtype != fx.dtype or t.device != fx.device:
            raise ValueError(
                f"{name} is {t.dtype} on {t.device}: expected {fx.dtype} on {fx.device} "
                "(dtype and device of fx)"
            )
    m = fneg.shape[0]
    if path == "scores" or (path == "auto" and (n * m <= BLOCK_SCORES or m <= d)):
        pos = (fx * fpos).sum(dim=1)  # (n,)
        if loss == "lse":
            return lse_risk(pos, scores_shared(fx, fneg), T)
        return info_nce(pos, scores_shared(fx, fneg), T)
    if loss == "lse":
        return shared_log_sum_exp_loss(fx, fpos, fneg, T, False, T, math.log(m))
    return shared_log_sum_exp_loss(fx, fpos, fneg, T, True)


def nt_xent(
    z1: torch.Tensor, z2: torch.Tensor, temperature: float, path: str = "auto"
) -> torch.Tensor:
    """SimCLR NT-Xent loss (Chen et al. 2020) over a batch of B pairs of views.

    With z = normalize([z1; z2]) (2B, D) and s_ij = z_i^T z_j / T, anchor i has positive
    p(i) = (i + B) mod 2B and negatives all j not in {i, p(i)}:
    loss = (1/2B) sum_i logsumexp_{j != i} (s_ij - s_{i p(i)}).
    Same value as pytorch-metric-learning `NTXentLoss(temperature=T)` on `cat([z1, z2])` with
    labels `arange(B).repeat(2)`.

    path: "plain" (one 2B x 2B matrix through autograd), "blocked" (crl.kernels.fused_contrast:
    row blocks, the gradient computed in the same pass, memory O(block x 2B)), or "auto":
    "plain" up to PLAIN_MAX_ROWS rows of z, "blocked" above (bench/kernels_losses.py).

    Shape: z1 (B, D), z2 (B, D) with B >= 2 -> ().
    """
    T = _validate.positive("temperature", temperature)
    _validate.choice("path", path, NT_XENT_PATHS)
    z1, z2 = _validate.floating("z1", z1), _validate.floating("z2", z2)
    if not (z1.ndim == 2 and z1.shape[0] >= 2 and z2.shape == z1.shape):  # messages on failure
        _validate.shape("z1", z1, "(B, D) with B >= 2", z1.ndim == 2 and z1.shape[0] >= 2)
        _validate.shape("z2", z2, f"{tuple(z1.shape)} (shape of z1)", False)
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=1)  # (2B, D)
    if path == "blocked" or (path == "auto" and z.shape[0] > PLAIN_MAX_ROWS):
        return nt_xent_blocked(z, T)
    logits = (z @ z.T).div_(T)  # (2B, 2B) s_ij
    logits.fill_diagonal_(-math.inf)  # j = i is not in the contrast set
    partner = (torch.arange(z.shape[0], device=z.device) + z1.shape[0]) % z.shape[0]
    return F.cross_entropy(logits, partner)  # the mean over <= PLAIN_MAX_ROWS rows, in z's dtype
