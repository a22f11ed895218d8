"""Score-based contrastive losses with their gradient computed in the forward pass.

InfoNCE, Li et al.'s LSE risk and Saunshi et al.'s k-negative logistic loss are one log-sum-exp
per anchor over logits a_ij = (neg_ij - pos_i) / t, with or without a zero logit:

    l_i = factor (log(z_i + sum_j e^{a_ij}) - shift),    z_i = 1 (zero logit) or 0,

    info_nce   t = T,  zero logit,     factor = 1,       shift = 0
    lse        t = T,  no zero logit,  factor = T,       shift = log m
    logistic   t = -1, zero logit,     factor = 1/ln 2,  shift = 0, pos = 0, neg = the margins v

With p_ij = e^{a_ij} / (z_i + sum_k e^{a_ik}) (the softmax over the row, zero logit included),
dl_i/dneg_ij = (factor / t) p_ij and dl_i/dpos_i = -(factor / t) sum_j p_ij, where
sum_j p_ij = 1 - e^{-lse_i} with the zero logit and 1 without it.

Autograd through the plain formulation (concatenate the zero logit, divide, log-softmax, pick,
average) allocates about four n x m buffers and runs some ten operations each way. Here the
forward pass makes one n x m buffer, turns it into p in place and keeps it; backward is one
scale of p. The mean over anchors is accumulated in float64 inside the forward pass. Rows
holding +inf give +inf and rows of -inf (without the zero logit) give -inf, as
`torch.logsumexp` does. The result is differentiable once: a second derivative raises
(`losses.info_nce(..., path="plain")` and `lse_risk(..., path="plain")` are twice
differentiable).

`shared_log_sum_exp_loss` takes the features instead of the scores when the negatives are shared
by all anchors (SSCRL, a queue, CLIP-scale sets): it computes the scores by row blocks and the
gradients of the features block by block in the forward pass, so the n x m scores are never
held whole.
"""

from __future__ import annotations

import torch

__all__ = ["BLOCK_SCORES", "log_sum_exp_loss", "shared_log_sum_exp_loss"]

BLOCK_SCORES = 2**22  # shared_log_sum_exp_loss: scores per row block (16 MiB in float32)


def _forward(
    pos: torch.Tensor | None,
    neg: torch.Tensor,
    t: float,
    zero_logit: bool,
    factor: float,
    shift: float,
    with_grad: bool,
    scratch: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-anchor losses (n,), the log-sum-exp lse_i (n,) and, `with_grad`, p (n, m).
    `scratch`: neg is a buffer of the caller's, overwritten (it becomes p)."""
    if scratch:
        logits = (neg.sub_(pos[:, None]) if pos is not None else neg).div_(t)  # a_ij
    elif pos is not None:
        logits = torch.sub(neg, pos[:, None]).div_(t)
    else:  # t = -1 (the logistic loss on margins) is a negation: one pass
        logits = torch.neg(neg) if t == -1.0 else torch.div(neg, t)
    top = logits.amax(dim=1, keepdim=True)  # (n, 1)
    if zero_logit:
        top.clamp_min_(0.0)
    top.masked_fill_(top.isinf(), 0.0)  # as torch.logsumexp: +-inf rows give +-inf, not NaN
    expd = logits.sub_(top).exp_()  # (n, m) e^{a_ij - top_i}, in place
    total = expd.sum(dim=1, keepdim=True)  # (n, 1)
    if zero_logit:
        total.add_(top.neg().exp_())
    soft = expd.div_(total) if with_grad else None  # (n, m) p_ij, in place
    lse = total.log_().add_(top).squeeze(1)  # (n,)
    per_anchor = lse if factor == 1.0 and not shift else (lse - shift).mul_(factor)
    return per_anchor, lse, soft


def _mean(per_anchor: torch.Tensor) -> torch.Tensor:
    """The mean over anchors, accumulated in float64, in the input dtype."""
    return per_anchor.mean(dtype=torch.float64).to(per_anchor.dtype)


class _LogSumExpLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pos, neg, t, zero_logit, factor, shift, mean):
        per_anchor, lse, soft = _forward(pos, neg, t, zero_logit, factor, shift, True)
        ctx.save_for_backward(soft, lse if zero_logit else None)
        ctx.scale, ctx.mean = factor / t, mean
        return _mean(per_anchor) if mean else per_anchor

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output: torch.Tensor):
        soft, lse = ctx.saved_tensors
        if ctx.mean:  # every anchor weighs 1/n
            weight = grad_output * (ctx.scale / soft.shape[0])  # ()
            grad_neg = soft * weight
        else:
            weight = grad_output * ctx.scale  # (n,)
            grad_neg = soft * weight[:, None]
        grad_pos = None
        if ctx.needs_input_grad[0]:  # -(sum_j p_ij) weight: sum_j p_ij = 1 - e^{-lse_i} or 1
            grad_pos = torch.expm1(-lse).mul_(weight) if lse is not None else -weight
            grad_pos = grad_pos.expand(soft.shape[0])
        return grad_pos, grad_neg, None, None, None, None, None


def log_sum_exp_loss(
    pos: torch.Tensor | None,
    neg: torch.Tensor,
    t: float,
    zero_logit: bool,
    factor: float = 1.0,
    shift: float = 0.0,
    mean: bool = False,
) -> torch.Tensor:
    """factor (log(z_i + sum_j e^{(neg_ij - pos_i) / t}) - shift) per anchor, or its mean.

    pos None means pos = 0; z_i = 1 with `zero_logit`, else 0. The gradient is computed in the
    forward pass when an input requires it and grad mode is on; differentiable once.
    Shape: pos (n,) or None, neg (n, m) -> (n,), or () with `mean`.
    """
    needs = neg.requires_grad or (pos is not None and pos.requires_grad)
    if torch.is_grad_enabled() and needs:
        return _LogSumExpLoss.apply(pos, neg, t, zero_logit, factor, shift, mean)
    per_anchor, _, _ = _forward(pos, neg, t, zero_logit, factor, shift, False)
    return _mean(per_anchor) if mean else per_anchor


class _BlockedSharedLoss(torch.autograd.Function):
    """The mean of `log_sum_exp_loss` over anchors fx (n, d) with positives fpos (n, d) and
    negatives fneg (m, d) shared by all, by row blocks. With c = factor / (t n) and s_i =
    sum_j p_ij, the gradient of the mean is

        d/dfx_i = c (sum_j p_ij fneg_j - s_i fpos_i),   d/dfpos_i = -c s_i fx_i,
        d/dfneg_j = c sum_i p_ij fx_i,

    accumulated block by block in the forward pass (one matmul for the scores, one each for the
    two sums: the plain formulation's three), so backward is a scale and memory is
    O(block x m) besides the inputs and their gradients.
    """

    @staticmethod
    def forward(ctx, fx, fpos, fneg, t, zero_logit, factor, shift, block, wants):
        n = fx.shape[0]
        c = factor / (t * n)
        total = torch.zeros((), dtype=torch.float64, device=fx.device)
        want_fx, want_fpos, want_fneg = wants
        # every row of g_fx and g_fpos is written once, by its block: no zero fill
        g_fx = torch.empty_like(fx) if want_fx else None
        g_fpos = torch.empty_like(fpos) if want_fpos else None
        g_fneg = torch.zeros_like(fneg) if want_fneg else None
        for start in range(0, n, block):
            rows = slice(start, start + block)
            xi, pi = fx[rows], fpos[rows]  # (b, d)
            pos = (xi * pi).sum(dim=1)  # (b,)
            neg = xi @ fneg.T  # (b, m), the block's scratch buffer
            per_anchor, lse, soft = _forward(
                pos, neg, t, zero_logit, factor, shift, any(wants), scratch=True
            )
            total += per_anchor.sum(dtype=torch.float64)
            if soft is None:
                continue
            # -c s_i, with s_i = sum_j p_ij = 1 - e^{-lse_i} (zero logit) or 1
            weight = torch.expm1(-lse).mul_(c) if zero_logit else torch.full_like(lse, -c)
            if g_fx is not None:  # c P fneg - c s fpos, the scale in the matmul
                g_fx[rows].addmm_(soft, fneg, beta=0.0, alpha=c).addcmul_(weight[:, None], pi)
            if g_fpos is not None:
                torch.mul(xi, weight[:, None], out=g_fpos[rows])
            if g_fneg is not None:
                g_fneg.addmm_(soft.T, xi, alpha=c)
        ctx.save_for_backward(g_fx, g_fpos, g_fneg)
        return (total / n).to(fx.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output: torch.Tensor):
        grads = [g * grad_output if g is not None else None for g in ctx.saved_tensors]
        return (*grads, None, None, None, None, None, None)


def shared_log_sum_exp_loss(
    fx: torch.Tensor,
    fpos: torch.Tensor,
    fneg: torch.Tensor,
    t: float,
    zero_logit: bool,
    factor: float = 1.0,
    shift: float = 0.0,
    block: int | None = None,
) -> torch.Tensor:
    """The mean over anchors of `log_sum_exp_loss` on pos_i = fx_i . fpos_i and the scores
    fx @ fneg.T, computed by row blocks of about BLOCK_SCORES scores (or `block` rows) with the
    gradient in the same pass; differentiable once.
    Shape: fx (n, d), fpos (n, d), fneg (m, d) -> ().
    """
    block = block or max(1, BLOCK_SCORES // fneg.shape[0])
    on = torch.is_grad_enabled()
    wants = tuple(on and x.requires_grad for x in (fx, fpos, fneg))
    return _BlockedSharedLoss.apply(fx, fpos, fneg, t, zero_logit, factor, shift, block, wants)
