"""NT-Xent over row blocks, with its gradient computed in the same pass.

For unit rows Z (N, D), N = 2B, S = Z Z^T / T and the partner involution p(i) = (i + B) mod N,
the loss is (1/N) sum_i [logsumexp_{j != i} S_ij - S_i,p(i)]. With P the row softmax of S over
j != i (zero diagonal), dL/dS = (P - E_p) / N and, since E_p is symmetric,

    dL/dZ = (P Z + P^T Z - 2 Z[p]) / (N T).

Autograd through the plain formulation stores the N x N scores and their softmax and reads them
again in the backward pass (three N x N GEMM-sized passes and about four N x N buffers). Here each
block of rows I is computed once: its scores, its log-sum-exp, its softmax P_I, and the two
products P_I Z and P_I^T Z_I that make the gradient, so memory is O(block x N), the N x D
gradient is kept for backward, and backward is a scale. Blocks are sized so a block of scores
holds about BLOCK_ELEMENTS numbers.
"""

from __future__ import annotations

import math

import torch

__all__ = ["BLOCK_ELEMENTS", "nt_xent_blocked"]

BLOCK_ELEMENTS = 2**22  # scores per block (16 MiB in float32): bench/kernels_losses.py


class _BlockedNTXent(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: torch.Tensor, temperature: float, block: int, with_grad: bool):
        n, half = z.shape[0], z.shape[0] // 2
        total = torch.zeros((), dtype=torch.float64, device=z.device)
        grad = torch.zeros_like(z) if with_grad else None
        # blocks never straddle the halves, so the diagonal (j = i) and the partners
        # (j = i +- n/2) of a block's rows are diagonals of the block: views, no index tensors
        starts = [*range(0, half, block), *range(half, n, block)]
        for start in starts:
            stop = min(start + block, half if start < half else n)
            zi = z[start:stop]  # (b, D)
            cos = zi @ z.T  # (b, N)
            shift = half if start < half else -half
            pos = cos.diagonal(offset=start + shift).clone()  # (b,) cosine of each positive
            delta = cos.sub_(pos[:, None]).div_(temperature)  # s_ij - s_i,p(i), in place
            delta.diagonal(offset=start).fill_(-math.inf)  # j = i is not in the contrast set
            lse = torch.logsumexp(delta, dim=1)  # (b,)
            total += lse.sum(dtype=torch.float64)
            if with_grad:
                soft = delta.sub_(lse[:, None]).exp_()  # P_I (b, N), zero on the diagonal
                grad[start:stop].addmm_(soft, z)  # P_I Z
                grad.addmm_(soft.T, zi)  # P_I^T Z_I
        if with_grad:
            grad.sub_(z.roll(half, dims=0), alpha=2.0).div_(n * temperature)  # z.roll: Z[p]
            ctx.save_for_backward(grad)
        return (total / n).to(z.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output: torch.Tensor):
        (grad,) = ctx.saved_tensors
        return grad * grad_output, None, None, None


def nt_xent_blocked(z: torch.Tensor, temperature: float, block: int | None = None) -> torch.Tensor:
    """NT-Xent of unit rows z (N, D), N even, rows i and (i + N/2) mod N a positive pair.

    The gradient with respect to z is computed in the forward pass when z requires it and grad
    mode is on (backward then only scales it); it is not differentiable twice.
    Shape: z (N, D) -> ().
    """
    n = z.shape[0]
    block = block or max(1, min(n, BLOCK_ELEMENTS // n))
    with_grad = torch.is_grad_enabled() and z.requires_grad
    return _BlockedNTXent.apply(z, temperature, block, with_grad)
