"""PAC-Bayes-kl certificates for a Gibbs head W ~ N(mean, sigma^2 I), losses scaled to [0, 1].

- `gaussian_kl(mean_q, mean_p, sigma_q, sigma_p)`: KL(N(mean_q, sigma_q^2 I) || N(mean_p,
  sigma_p^2 I)) in k = mean_q.numel() dimensions, = (k sigma_q^2 / sigma_p^2 + ||mean_q -
  mean_p||^2 / sigma_p^2 - k + 2 k ln(sigma_p / sigma_q)) / 2, in float64.
- `pac_bayes_kl_bound(gibbs_train, kl, n, delta)`: Maurer (2004): for a prior P fixed before
  the n i.i.d. losses are seen, with probability >= 1 - delta, simultaneously for every
  posterior Q, kl(Lhat_S(Q) || L(Q)) <= (KL(Q || P) + ln(2 sqrt(n) / delta)) / n; the bound is
  L(Q) <= kl^-1(Lhat_S(Q), that right-hand side).
- `monte_carlo_upper(mean, draws, delta)`: Lhat_S(Q) is an expectation over W ~ Q; from
  `draws` independent heads whose empirical risks average `mean`, with probability >= 1 - delta
  Lhat_S(Q) <= kl^-1(mean, ln(1/delta) / draws) (Langford and Caruana 2002; the Chernoff bound
  for [0, 1] variables, one-sided).
- `empirical_bernstein_upper(mean, variance, draws, delta)`: the same expectation bounded with
  the samples' variance (Maurer and Pontil 2009): the heads' empirical risks vary little
  around their mean, so past a few hundred heads this is the tighter of the two.
- `noise_scale(relative, radius, dims)`: the per-entry sigma whose noise has expected squared
  norm (relative R)^2, sigma = relative R / sqrt(dims): a grid fixed before any data is seen.
- `gibbs_heads(mean, sigma, radius, count, gen)`: `count` heads W = P_R(mean + sigma E), E
  standard normal, projected onto ||W||_F <= R so that every loss keeps its range. The
  projection is a fixed map, so the bounds hold for the loss of P_R(W) with KL measured on W.
- `gibbs_risks(heads, blocks, loss, temperature)`: each head's empirical risk on a sample of
  blocks (crl.kernels.learner), and each anchor's loss averaged over the heads.
"""

from __future__ import annotations

import math

import torch

from crl.kernels import _validate, learner
from crl.kernels.certificates import kl_inverse_upper

__all__ = [
    "empirical_bernstein_upper",
    "gaussian_kl",
    "gibbs_heads",
    "gibbs_risks",
    "procrustes",
    "monte_carlo_upper",
    "noise_scale",
    "pac_bayes_kl_bound",
    "pac_bayes_kl_term",
]


def gaussian_kl(
    mean_q: torch.Tensor, mean_p: torch.Tensor, sigma_q: float, sigma_p: float
) -> float:
    """KL between isotropic Gaussians of the same dimension k = mean_q.numel(), in float64."""
    if mean_q.shape != mean_p.shape:
        raise ValueError(f"means of shapes {tuple(mean_q.shape)} and {tuple(mean_p.shape)}")
    sigma_q = _validate.positive("sigma_q", sigma_q)
    sigma_p = _validate.positive("sigma_p", sigma_p)
    k = mean_q.numel()
    ratio = (sigma_q / sigma_p) ** 2
    distance = float(((mean_q.double() - mean_p.double()) ** 2).sum()) / sigma_p**2
    return 0.5 * (k * ratio + distance - k - k * math.log(ratio))


def pac_bayes_kl_term(kl: float, n: int, delta: float) -> float:
    """(KL + ln(2 sqrt(n) / delta)) / n, the right-hand side of Maurer's bound."""
    kl = _validate.nonnegative("kl", kl)
    n = _validate.at_least("n", n, 1)
    delta = _validate.open_unit("delta", delta)
    return (kl + math.log(2.0 * math.sqrt(n) / delta)) / n


def pac_bayes_kl_bound(gibbs_train: float, kl: float, n: int, delta: float) -> float:
    """Maurer's PAC-Bayes-kl bound on L(Q) from an upper bound on Lhat_S(Q) in [0, 1]."""
    q = min(max(gibbs_train, 0.0), 1.0)
    return kl_inverse_upper(q, pac_bayes_kl_term(kl, n, delta))


def monte_carlo_upper(mean: float, draws: int, delta: float) -> float:
    """Upper bound on an expectation in [0, 1] from the mean of `draws` independent samples."""
    draws = _validate.at_least("draws", draws, 1)
    delta = _validate.open_unit("delta", delta)
    return kl_inverse_upper(min(max(mean, 0.0), 1.0), math.log(1.0 / delta) / draws)


def empirical_bernstein_upper(mean: float, variance: float, draws: int, delta: float) -> float:
    """Maurer and Pontil (2009, Thm 4): for `draws` >= 2 i.i.d. samples in [0, 1] with mean
    `mean` and unbiased sample variance `variance`, with probability >= 1 - delta the
    expectation is at most mean + sqrt(2 variance ln(2/delta) / k) + 7 ln(2/delta) / (3 (k -
    1)), capped at 1."""
    draws = _validate.at_least("draws", draws, 2)
    delta = _validate.open_unit("delta", delta)
    log_term = math.log(2.0 / delta)
    spread = math.sqrt(2.0 * max(variance, 0.0) * log_term / draws)
    return min(1.0, mean + spread + 7.0 * log_term / (3.0 * (draws - 1)))


def noise_scale(relative: float, radius: float, dims: int) -> float:
    """Per-entry sigma with E||sigma E||^2 = (relative * radius)^2 over `dims` entries."""
    relative = _validate.positive("relative", relative)
    radius = _validate.positive("radius", radius)
    return relative * radius / math.sqrt(_validate.at_least("dims", dims, 1))


def gibbs_heads(
    mean: torch.Tensor, sigma: float, radius: float, count: int, gen: torch.Generator
) -> torch.Tensor:
    """`count` draws of P_R(mean + sigma E). Shape: mean (d, p) -> (count, d, p), float64."""
    sigma = _validate.positive("sigma", sigma)
    count = _validate.at_least("count", count, 1)
    noise = torch.randn((count, *mean.shape), generator=gen, dtype=torch.float64)
    heads = mean.double().unsqueeze(0) + sigma * noise  # (count, d, p)
    norms = torch.linalg.vector_norm(heads.flatten(1), dim=1)  # (count,)
    scale = torch.clamp(radius / norms, max=1.0)
    return heads * scale[:, None, None]


@torch.no_grad()
def gibbs_risks(
    heads: torch.Tensor,
    blocks: learner.Blocks,
    loss: str,
    temperature: float,
    budget: int = 2**24,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every head's mean loss over the sample, and every anchor's loss averaged over the heads.

    A chunk of c heads (about `budget` gathered values) is one matmul of each table by the
    stacked heads (p, c d); with own negatives the chunk's heads then join the anchors' batch
    (n c tuples through the learner's objective at once), with shared negatives (which differ
    per head once projected) each head goes through it on its own slice.
    Shape: heads (count, d, p) -> (count,), (n,), float64.
    """
    count, d, p = heads.shape
    risks = torch.zeros(count, dtype=torch.float64)
    per_anchor = []
    n = 0
    for views, sample in blocks:
        b, m = sample.anchors.shape[0], sample.negatives.shape[-1]
        rows = max(views.anchor.shape[0], b * (m + 2))
        chunk = max(1, min(count, budget // max(1, rows * d)))
        block_sum = torch.zeros(b, dtype=torch.float64)
        for start in range(0, count, chunk):
            part = heads[start : start + chunk].to(views.anchor.dtype)  # (c, d, p)
            terms = _chunk_terms(part, views, sample, loss, temperature)  # (b, c)
            risks[start : start + part.shape[0]] += terms.sum(0)
            block_sum += terms.sum(1)
        n += b
        per_anchor.append(block_sum / count)
    return risks / n, torch.cat(per_anchor)


def _chunk_terms(
    part: torch.Tensor,
    views: learner.Views,
    sample: learner.Sample,
    loss: str,
    temperature: float,
) -> torch.Tensor:
    """The losses of c heads on a block's tuples. Shape: part (c, d, p) -> (b, c) float64."""
    c, d, p = part.shape
    stacked = part.reshape(c * d, p)
    fa_all = views.anchor @ stacked.T  # (N, c d)
    fp_all = fa_all if views.positive is views.anchor else views.positive @ stacked.T
    fn_all = fa_all if views.negative is views.anchor else views.negative @ stacked.T
    b = sample.anchors.shape[0]
    fa = fa_all[sample.anchors].reshape(b, c, d)
    fp = fp_all[sample.positives].reshape(b, c, d)
    if sample.shared:
        fn = fn_all[sample.negatives].reshape(-1, c, d)  # (m, c, d)
        columns = [
            learner.objective(fa[:, j], fp[:, j], fn[:, j], True, loss, temperature)
            for j in range(c)
        ]
        return torch.stack(columns, dim=1).double()
    m = sample.negatives.shape[1]
    fn = fn_all[sample.negatives].reshape(b, m, c, d).transpose(1, 2)  # (b, c, m, d)
    terms = learner.objective(
        fa.reshape(b * c, d),
        fp.reshape(b * c, d),
        fn.reshape(b * c, m, d),
        False,
        loss,
        temperature,
    )
    return terms.reshape(b, c).double()


def procrustes(moving: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The orthogonal Q (d, d) minimising ||Q moving - target||_F (moving, target (d, p)):
    Q = U V^T for U S V^T = target moving^T. f = W phi and Q W phi give the same scores, so a
    head may be rotated onto a prior's mean without changing any loss."""
    u, _, vh = torch.linalg.svd(target.double() @ moving.double().T)
    return u @ vh
