"""PAC-Bayes-kl certificates for a Gibbs head W ~ N(mean, sigma^2 I), losses scaled to [0, 1].

- `gaussian_kl(mean_q, mean_p, sigma_q, sigma_p)`: KL(N(mean_q, sigma_q^2 I) || N(mean_p,
  sigma_p^2 I)) in k = mean_q.numel() dimensions, = (k sigma_q^2 / sigma_p^2 + ||mean_q -
  mean_p||^2 / sigma_p^2 - k + 2 k ln(sigma_p / sigma_q)) / 2, in float64.
- `pac_bayes_kl_bound(gibbs_train, kl, n, delta)`: Maurer (2004): for a prior P fixed before
  the n i.i.d. losses are seen, with probability >= 1 - delta, simultaneously for every
  posterior Q, kl(Lhat_S(Q) || L(Q)) <= (KL(Q || P) + ln(2 sqrt(n) / delta)) / n; the bound is
  L(Q) <= kl^-1(Lhat_S(Q), that right-hand side).
- `monte_carlo_upper(mean, draws, delta)`: Lhat_S(Q) is an expectation over W ~ Q; from
  `draws` independent [0, 1] samples of mean Lhat_S(Q) (`gibbs_draws`) that average `mean`,
  with probability >= 1 - delta Lhat_S(Q) <= kl^-1(mean, ln(1/delta) / draws) (Langford and
  Caruana 2002; the Chernoff bound for [0, 1] variables, one-sided).
- `crl.kernels.certificates.empirical_bernstein_upper(mean, variance, draws, delta)`: the same
  expectation bounded with the samples' variance (Maurer and Pontil 2009): losses that spread
  little next to their range make this the tighter of the two.
- `excess_bound(excess, kl, n, delta_pb, delta_mc)`: a PAC-Bayes bound on L(Q) - L(h_ref), h_ref
  a head fixed before the n units are seen, from Monte Carlo draws of X = l(W, z) - l(h_ref, z)
  in [-1, 1] (W ~ Q, z a uniformly drawn unit). For X <= 1 and eta in [0, 1),
  E exp(eta (E X - X) - psi(eta) X^2) <= 1 with psi(eta) = -ln(1 - eta) - eta (the pointwise
  inequality exp(lambda y - psi(lambda) y^2) <= 1 + lambda y for y >= -1, at y = -X: Fan, Grama
  and Liu 2012; the un-expected Bernstein inequality of Mhammedi, Grunwald and Guedj 2019), so
  the PAC-Bayes change of measure gives, with probability >= 1 - delta_pb, for every Q and
  every eta of a grid fixed before the units are seen (`ETAS`, or one eta chosen on other
  data; a union bound over it):
      L(Q) - L(h_ref) <= E_Q[Lhat(W) - Lhat(h_ref)] + (psi(eta)/eta) E_Q[mean_i X_i^2]
                         + (KL(Q || P) + ln(|grid| / delta_pb)) / (eta n).
  The two empirical terms are one expectation, of Y = X + (psi(eta)/eta) X^2, bounded from the
  draws (i.i.d. given the sample, mean exactly that expectation) at delta_mc / |grid| for each
  eta, on Y's exact range [min_x (x + c x^2), 1 + c] over x in [-1, 1] (`y_floor`). Where the
  Gibbs heads stay close to h_ref, X^2 is small and the bound's last term falls
  as 1/n, not 1/sqrt(n).
- `noise_scale(relative, radius, dims)`: the per-entry sigma whose noise has expected squared
  norm (relative R)^2, sigma = relative R / sqrt(dims): a grid fixed before any data is seen.
- `gibbs_heads(mean, sigma, radius, count, gen)`: `count` heads W = P_R(mean + sigma E), E
  standard normal, projected onto ||W||_F <= R so that every loss keeps its range. The
  projection is a fixed map, so the bounds hold for the loss of P_R(W) with KL measured on W.
- `gibbs_draws(mean, sigma, radius, blocks, count, loss, temperature, gen)`: the losses of
  `count` independent pairs (W, i), W a Gibbs head and i an anchor drawn uniformly from the
  sample: given the sample they are i.i.d. with mean exactly the empirical Gibbs risk
  Lhat_S(Q), so their mean and variance feed the Monte Carlo bounds above, at a cost of one
  tuple per draw whatever n is (a head scored on every anchor costs n tuples and is one draw).
- `gibbs_anchor_means(mean, sigma, radius, block, heads, loss, temperature, gen)`: each anchor's
  loss averaged over `heads` fresh heads of its own: i.i.d. over i.i.d. anchors, with mean the
  Gibbs head's risk L(Q), so their mean and spread estimate it with a confidence interval.
- `unit_draws`, `unit_means`: the same for any i.i.d. units (a dense cell's images with their
  negatives) given `terms`, the loss of a batch of heads each on its own unit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from crl.kernels import _validate, learner
from crl.kernels.certificates import held_out_upper, kl_inverse_upper

__all__ = [
    "ETAS",
    "block_reference_losses",
    "excess_bound",
    "fixed_head_losses",
    "gaussian_kl",
    "gibbs_anchor_means",
    "gibbs_draws",
    "gibbs_heads",
    "procrustes",
    "projected_excess_bound",
    "tuple_terms",
    "y_floor",
    "monte_carlo_upper",
    "noise_scale",
    "pac_bayes_kl_bound",
    "pac_bayes_kl_term",
    "unit_draws",
    "unit_means",
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


# the fixed grid of eta for `excess_bound` (a union bound over it)
ETAS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99)


def psi(eta: float) -> float:
    """-ln(1 - eta) - eta, the un-expected Bernstein inequality's coefficient of X^2."""
    return -math.log1p(-eta) - eta


def excess_bound(
    excess: torch.Tensor,
    kl: float,
    n: int,
    delta_pb: float,
    delta_mc: float,
    etas: tuple[float, ...] = ETAS,
) -> tuple[float, float]:
    """The upper bound on L(Q) - L(h_ref) of the module docstring, minimised over the grid
    `etas` (fixed before the n units are seen; a union bound over it), and the eta that gives
    it. Shape: excess (K,) draws of X in [-1, 1], K >= 2."""
    n = _validate.at_least("n", n, 1)
    kl = _validate.nonnegative("kl", kl)
    delta_pb = _validate.open_unit("delta_pb", delta_pb)
    delta_mc = _validate.open_unit("delta_mc", delta_mc)
    if not etas or not all(0.0 < eta < 1.0 for eta in etas):
        raise ValueError(f"etas={etas} must be a non-empty grid in (0, 1)")
    x = excess.double().clamp(-1.0, 1.0)
    draws = _validate.at_least("draws", int(x.shape[0]), 2)
    grid = len(etas)
    bounds = [
        (_excess_at(x, eta, draws, kl, n, delta_pb / grid, delta_mc / grid), eta) for eta in etas
    ]
    return min(bounds)


def projected_excess_bound(
    excess: torch.Tensor,
    kl: float,
    n: int,
    delta_pb: float,
    delta_mc: float,
    eta: float,
    draws: int,
) -> float:
    """`excess_bound` at the one eta, as `draws` draws with the mean and variance of these
    (K,) draws of X would give it: an estimate for choosing eta and the noise scale on other
    data (pilot draws are few; the bound's are many), not a bound."""
    x = excess.double().clamp(-1.0, 1.0)
    _validate.at_least("draws", int(x.shape[0]), 2)
    draws = _validate.at_least("draws", draws, 2)
    return _excess_at(x, eta, draws, kl, n, delta_pb, delta_mc)


def _excess_at(
    x: torch.Tensor, eta: float, draws: int, kl: float, n: int, delta_pb: float, delta_mc: float
) -> float:
    """The bound at one eta with its PAC-Bayes part at delta_pb and its Monte Carlo part (the
    mean of Y = X + (psi(eta)/eta) X^2 from `draws` draws with x's mean and variance) at
    delta_mc."""
    c = psi(eta) / eta
    low = y_floor(c)
    width = 1.0 + c - low
    unit = (x + c * x * x - low) / width  # Y in [low, 1 + c], to [0, 1]
    upper = held_out_upper(float(unit.mean()), float(unit.var()), draws, delta_mc)
    return upper * width + low + (kl + math.log(1.0 / delta_pb)) / (eta * n)


def y_floor(c: float) -> float:
    """min over x in [-1, 1] of y = x + c x^2 (c > 0): -1/(4c) at x = -1/(2c) where c >= 1/2,
    else c - 1 at x = -1. Y's range [y_floor(c), 1 + c] scales its Monte Carlo bound."""
    return -1.0 / (4.0 * c) if c >= 0.5 else c - 1.0


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


DRAW_BUDGET = 2**21  # float64 feature values gathered per chunk of draws: 16 MiB


@torch.no_grad()
def gibbs_draws(
    mean: torch.Tensor,
    sigma: float,
    radius: float,
    blocks: learner.Blocks,
    count: int,
    loss: str,
    temperature: float,
    gen: torch.Generator,
    budget: int = DRAW_BUDGET,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The losses of `count` independent draws (W, i): W = P_R(mean + sigma E) and i uniform
    over the sample's anchors, and each draw's anchor i (its index in the sample, blocks in
    order). The blocks' shares of the draws are drawn first (multinomial in their sizes), then
    each block is visited once with its draws, so a streamed sample is made once; the order of
    i.i.d. draws does not change their law. The losses are in float64 from the float32 tables
    (exact widening). Shape: mean (d, p) -> (count,) float64 and (count,) int64, in the order
    of the blocks."""
    count = _validate.at_least("count", count, 1)
    sizes = torch.tensor(learner.block_sizes(blocks), dtype=torch.float64)
    owner = torch.multinomial(sizes / sizes.sum(), count, replacement=True, generator=gen)
    shares = torch.bincount(owner, minlength=len(sizes)).tolist()
    offsets = [0, *torch.cumsum(sizes, 0).long().tolist()]
    losses, rows = [], []
    for b, share in enumerate(shares):
        if share == 0:
            continue
        units, terms, chunk = _block_units(blocks[b], loss, temperature, budget)
        drawn, at = unit_draws(mean, sigma, radius, units, share, terms, chunk, gen)
        losses.append(drawn)
        rows.append(at + offsets[b])
    return torch.cat(losses), torch.cat(rows)


def block_reference_losses(
    head: torch.Tensor, blocks: learner.Blocks, loss: str, temperature: float
) -> torch.Tensor:
    """A fixed head's loss on every anchor of the sample, block after block, in float64 (as
    the draws score it). Shape: head (d, p) -> (n,)."""
    out = []
    for b in range(len(learner.block_sizes(blocks))):
        units, terms, chunk = _block_units(blocks[b], loss, temperature, DRAW_BUDGET)
        out.append(fixed_head_losses(head, units, terms, chunk))
    return torch.cat(out)


@torch.no_grad()
def gibbs_anchor_means(
    mean: torch.Tensor,
    sigma: float,
    radius: float,
    block: tuple[learner.Views, learner.Sample],
    heads: int,
    loss: str,
    temperature: float,
    gen: torch.Generator,
    budget: int = DRAW_BUDGET,
) -> torch.Tensor:
    """Each anchor's loss averaged over `heads` Gibbs heads P_R(mean + sigma E) of its own.
    Shape: mean (d, p) -> (anchors,) float64."""
    units, terms, chunk = _block_units(block, loss, temperature, budget)
    return unit_means(mean, sigma, radius, units, heads, terms, chunk, gen)


# (heads (c, d, p), units (c,)) -> the loss of head k on unit units[k], (c,) float64
Terms = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@torch.no_grad()
def unit_draws(
    mean: torch.Tensor,
    sigma: float,
    radius: float,
    units: int,
    count: int,
    terms: Terms,
    chunk: int,
    gen: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The losses of `count` independent draws (W, i), W = P_R(mean + sigma E) and i uniform
    over `units` i.i.d. units (an anchor's tuple, an image with its negatives), `chunk` draws at
    a time, each chunk's heads drawn before its units, and each draw's unit i. Shape: mean
    (d, p) -> (count,) float64 and (count,) int64."""
    count = _validate.at_least("count", count, 1)
    units = _validate.at_least("units", units, 1)
    losses, drawn_rows = [], []
    for start in range(0, count, chunk):
        c = min(chunk, count - start)
        heads = gibbs_heads(mean, sigma, radius, c, gen)
        rows = torch.randint(0, units, (c,), generator=gen)
        losses.append(terms(heads, rows))
        drawn_rows.append(rows)
    return torch.cat(losses), torch.cat(drawn_rows)


@torch.no_grad()
def unit_means(
    mean: torch.Tensor,
    sigma: float,
    radius: float,
    units: int,
    heads: int,
    terms: Terms,
    chunk: int,
    gen: torch.Generator,
) -> torch.Tensor:
    """Each unit's loss averaged over `heads` Gibbs heads of its own, about `chunk` (unit, head)
    pairs at a time. Shape: mean (d, p) -> (units,)."""
    heads = _validate.at_least("heads", heads, 1)
    per_chunk = max(1, chunk // heads)  # units per chunk
    out = []
    for start in range(0, units, per_chunk):
        rows = torch.arange(start, min(units, start + per_chunk)).repeat_interleave(heads)
        drawn = gibbs_heads(mean, sigma, radius, rows.shape[0], gen)
        out.append(terms(drawn, rows).reshape(-1, heads).mean(1))
    return torch.cat(out)


@torch.no_grad()
def fixed_head_losses(head: torch.Tensor, units: int, terms: Terms, chunk: int) -> torch.Tensor:
    """A fixed head's loss on every one of `units` units, `chunk` at a time. Shape: head (d, p)
    -> (units,) float64."""
    head = head.double()
    out = []
    for start in range(0, units, chunk):
        rows = torch.arange(start, min(units, start + chunk))
        out.append(terms(head.unsqueeze(0).expand(rows.shape[0], *head.shape), rows))
    return torch.cat(out)


def _block_units(
    block: tuple[learner.Views, learner.Sample], loss: str, temperature: float, budget: int
) -> tuple[int, Terms, int]:
    """A block's anchors as units: their count, their tuples' loss and the draws per chunk."""
    views, sample = block
    terms = tuple_terms(views, sample, loss, temperature)
    return int(sample.anchors.shape[0]), terms, _draw_chunk(sample, views, budget)


def _draw_chunk(sample: learner.Sample, views: learner.Views, budget: int) -> int:
    """Draws per chunk: each gathers m + 2 rows of p values."""
    m, p = sample.negatives.shape[-1], views.anchor.shape[1]
    return max(1, budget // ((m + 2) * p))


def tuple_terms(
    views: learner.Views, sample: learner.Sample, loss: str, temperature: float
) -> Terms:
    """The loss of head k on the tuple of anchor rows[k] of the sample, in float64
    (differentiable in the heads)."""

    def terms(heads: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        c = rows.shape[0]
        negatives = sample.negatives.expand(c, -1) if sample.shared else sample.negatives[rows]
        tuples = torch.cat(
            [
                views.anchor[sample.anchors[rows]].unsqueeze(1),
                views.positive[sample.positives[rows]].unsqueeze(1),
                views.negative[negatives],
            ],
            dim=1,
        ).double()  # (c, m + 2, p): exact widening of the float32 tables
        f = torch.bmm(tuples, heads.transpose(1, 2))  # (c, m + 2, d)
        fa, fp, fn = f[:, 0], f[:, 1], f[:, 2:]
        return learner.objective(fa, fp, fn, False, loss, temperature)

    return terms


def procrustes(moving: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The orthogonal Q (d, d) minimising ||Q moving - target||_F (moving, target (d, p)):
    Q = U V^T for U S V^T = target moving^T. f = W phi and Q W phi give the same scores, so a
    head may be rotated onto a prior's mean without changing any loss."""
    u, _, vh = torch.linalg.svd(target.double() @ moving.double().T)
    return u @ vh
