"""PAC-Bayes kernels: the Gaussian KL against torch's and its formula, Maurer's bound and the
Monte Carlo term at their definitions and their levels, Gibbs heads, and the draws of their
losses against naive loops and the risk they estimate."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from crl.kernels import certificates, learner, pac_bayes
from crl.kernels.certificates import kl_bernoulli


def test_gaussian_kl_matches_torch_and_the_closed_form() -> None:
    gen = torch.Generator().manual_seed(0)
    for k, sq, sp in ((1, 0.3, 0.3), (5, 0.2, 0.7), (12, 1.5, 0.4)):
        mq = torch.randn(k, generator=gen, dtype=torch.float64)
        mp = torch.randn(k, generator=gen, dtype=torch.float64)
        q = torch.distributions.Normal(mq, torch.full((k,), sq, dtype=torch.float64))
        p = torch.distributions.Normal(mp, torch.full((k,), sp, dtype=torch.float64))
        expected = float(torch.distributions.kl_divergence(q, p).sum())
        assert pac_bayes.gaussian_kl(mq, mp, sq, sp) == pytest.approx(expected, rel=1e-12)
    mq = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    mp = torch.zeros(3, 4, dtype=torch.float64)
    # equal scales: ||mean_q - mean_p||^2 / (2 sigma^2); equal laws: 0
    closed = float((mq**2).sum()) / (2 * 0.25**2)
    assert pac_bayes.gaussian_kl(mq, mp, 0.25, 0.25) == pytest.approx(closed, rel=1e-12)
    assert pac_bayes.gaussian_kl(mq, mq, 0.25, 0.25) == 0.0
    with pytest.raises(ValueError, match="shapes"):
        pac_bayes.gaussian_kl(mq, mp.reshape(-1), 0.1, 0.1)
    with pytest.raises(ValueError, match="sigma_q"):
        pac_bayes.gaussian_kl(mq, mp, 0.0, 0.1)


def test_maurer_bound_sits_where_kl_meets_the_right_hand_side() -> None:
    for q, kl, n, delta in ((0.1, 3.0, 500, 0.05), (0.4, 0.0, 10_000, 0.01), (0.0, 20.0, 64, 0.1)):
        term = (kl + math.log(2 * math.sqrt(n) / delta)) / n
        assert pac_bayes.pac_bayes_kl_term(kl, n, delta) == pytest.approx(term, rel=1e-15)
        bound = pac_bayes.pac_bayes_kl_bound(q, kl, n, delta)
        assert bound > q
        assert kl_bernoulli(q, bound) == pytest.approx(term, rel=1e-9)
        # more KL, a looser bound
        assert pac_bayes.pac_bayes_kl_bound(q, kl + 5.0, n, delta) > bound
    assert pac_bayes.pac_bayes_kl_bound(0.5, 1e6, 10, 0.05) == 1.0


def test_monte_carlo_upper_covers_at_its_level() -> None:
    """Heads' empirical risks in [0, 1] with a known mean: the upper bound falls below the mean
    in at most delta of the repetitions (and its end satisfies kl = ln(1/delta) / k)."""
    rng = np.random.default_rng(1)
    k, delta, reps, truth = 100, 0.1, 3000, 2.0 / 7.0
    draws = rng.beta(2.0, 5.0, size=(reps, k))
    uppers = [pac_bayes.monte_carlo_upper(float(row.mean()), k, delta) for row in draws]
    assert sum(u < truth for u in uppers) / reps <= delta
    q = float(draws[0].mean())
    assert kl_bernoulli(q, uppers[0]) == pytest.approx(math.log(1 / delta) / k, rel=1e-9)


def test_empirical_bernstein_covers_and_beats_kl_at_small_variance() -> None:
    rng = np.random.default_rng(4)
    k, delta, reps = 400, 0.1, 3000
    # samples near 0.3 with a small spread, as the heads' empirical risks are
    draws = np.clip(rng.normal(0.3, 0.01, size=(reps, k)), 0.0, 1.0)
    truth = 0.3
    uppers = [
        certificates.empirical_bernstein_upper(float(r.mean()), float(r.var(ddof=1)), k, delta)
        for r in draws
    ]
    assert sum(u < truth for u in uppers) / reps <= delta
    mean, var = float(draws[0].mean()), float(draws[0].var(ddof=1))
    log_term = math.log(2 / delta)
    closed = mean + math.sqrt(2 * var * log_term / k) + 7 * log_term / (3 * (k - 1))
    assert uppers[0] == pytest.approx(closed, rel=1e-12)
    assert uppers[0] < pac_bayes.monte_carlo_upper(mean, k, delta)
    assert certificates.empirical_bernstein_upper(0.9, 0.2, 3, 0.05) == 1.0


def test_procrustes_undoes_a_rotation() -> None:
    gen = torch.Generator().manual_seed(5)
    target = torch.randn(4, 9, generator=gen, dtype=torch.float64)
    rotation, _ = torch.linalg.qr(torch.randn(4, 4, generator=gen, dtype=torch.float64))
    moving = rotation.T @ target + 1e-3 * torch.randn(4, 9, generator=gen, dtype=torch.float64)
    q = pac_bayes.procrustes(moving, target)
    assert torch.allclose(q @ q.T, torch.eye(4, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(q, rotation, atol=1e-2)
    aligned = float(torch.linalg.matrix_norm(q @ moving - target))
    # no orthogonal matrix does better (random ones and the identity)
    for _ in range(50):
        other, _ = torch.linalg.qr(torch.randn(4, 4, generator=gen, dtype=torch.float64))
        assert aligned <= float(torch.linalg.matrix_norm(other @ moving - target))
    # the scores W^T W are unchanged
    assert torch.allclose((q @ moving).T @ (q @ moving), moving.T @ moving, atol=1e-12)


def test_noise_scale_and_gibbs_heads() -> None:
    sigma = pac_bayes.noise_scale(0.1, 2.0, 16)
    assert sigma == pytest.approx(0.1 * 2.0 / 4.0)
    gen = torch.Generator().manual_seed(2)
    mean = torch.ones(2, 3, dtype=torch.float64)
    heads = pac_bayes.gibbs_heads(mean, 0.05, 100.0, 20_000, gen)
    assert heads.shape == (20_000, 2, 3) and heads.dtype == torch.float64
    # far inside the ball: the draws are N(mean, sigma^2 I)
    assert torch.allclose(heads.mean(0), mean, atol=0.003)
    assert float(heads.std(0).mean()) == pytest.approx(0.05, rel=0.02)
    # near the sphere: every head is projected into the ball, the ones inside untouched
    small = pac_bayes.gibbs_heads(mean, 1.0, math.sqrt(6.0), 500, gen)
    norms = torch.linalg.vector_norm(small.flatten(1), dim=1)
    assert bool((norms <= math.sqrt(6.0) * (1 + 1e-12)).all())
    assert bool((norms < math.sqrt(6.0) * 0.999).any())


def _blocks(shared: bool, gen: torch.Generator, sizes: tuple[int, ...] = (30, 30)):
    p, m = 5, 4
    table = torch.nn.functional.normalize(torch.randn(60, p, generator=gen), dim=1)
    views = learner.Views(table, table, table, torch.zeros(60, dtype=torch.long), True)
    blocks = []
    for n in sizes:
        negatives = torch.randint(0, 60, (m,) if shared else (n, m), generator=gen)
        sample = learner.Sample(
            torch.randint(0, 60, (n,), generator=gen),
            torch.randint(0, 60, (n,), generator=gen),
            negatives,
        )
        blocks.append((views, sample))
    return blocks


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("loss", ["hinge", "lse", "info_nce"])
def test_gibbs_draws_are_a_head_on_an_anchor_against_a_loop(loss: str, shared: bool) -> None:
    """One block, chunks of 3 draws: the same generator replayed gives the heads and anchors,
    and each draw's loss is the head's loss on that anchor by per_anchor_loss in float64."""
    gen = torch.Generator().manual_seed(3)
    ((views, sample),) = _blocks(shared, gen, (30,))
    mean = 0.5 * torch.randn(3, 5, generator=gen, dtype=torch.float64)
    seed = int(torch.randint(0, 2**31, (1,), generator=gen))
    drawn, drawn_rows = pac_bayes.gibbs_draws(
        mean,
        0.4,
        2.0,
        [(views, sample)],
        7,
        loss,
        0.5,
        torch.Generator().manual_seed(seed),
        budget=3 * 6 * 5,
    )
    replay = torch.Generator().manual_seed(seed)
    torch.multinomial(torch.ones(1, dtype=torch.float64), 7, replacement=True, generator=replay)
    expected, expected_rows = [], []
    for c in (3, 3, 1):
        heads = pac_bayes.gibbs_heads(mean, 0.4, 2.0, c, replay)
        rows = torch.randint(0, 30, (c,), generator=replay)
        expected_rows += rows.tolist()
        for head, i in zip(heads, rows.tolist(), strict=True):
            wide = learner.Views(
                *(t.double() for t in (views.anchor, views.positive, views.negative)),
                views.labels,
                True,
            )
            expected.append(
                float(learner.per_anchor_loss(head, wide, sample.part(slice(i, i + 1)), loss, 0.5))
            )
    assert drawn.dtype == torch.float64 and drawn_rows.tolist() == expected_rows
    assert torch.allclose(
        drawn, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-12
    )


def test_gibbs_draws_average_to_the_empirical_gibbs_risk() -> None:
    """Over blocks of unequal sizes, the mean of many draws matches the empirical Gibbs risk
    (every head on every anchor, by per_anchor_loss) within its standard error."""
    gen = torch.Generator().manual_seed(5)
    blocks = _blocks(False, gen, (40, 10, 25))
    mean = 0.8 * torch.randn(3, 5, generator=gen, dtype=torch.float64)
    drawn, rows = pac_bayes.gibbs_draws(mean, 0.5, 2.0, blocks, 60_000, "info_nce", 0.5, gen)
    assert int(rows.min()) >= 0 and int(rows.max()) < 75  # indices into the blocks in order
    heads = pac_bayes.gibbs_heads(mean, 0.5, 2.0, 4000, gen)
    exact = torch.stack(
        [
            torch.cat(
                [learner.per_anchor_loss(h.float(), v, s, "info_nce", 0.5) for v, s in blocks]
            )
            for h in heads
        ]
    ).mean()  # (heads, anchors) averaged: the risk up to 4000 heads' noise
    error = float(drawn.std()) / math.sqrt(drawn.shape[0])
    assert abs(float(drawn.mean()) - float(exact)) < 4 * error + 0.01 * float(exact)


@pytest.mark.parametrize("loss", ["logistic", "info_nce"])
def test_gibbs_anchor_means_average_fresh_heads_per_anchor(loss: str) -> None:
    gen = torch.Generator().manual_seed(6)
    ((views, sample),) = _blocks(False, gen, (11,))
    mean = 0.5 * torch.randn(3, 5, generator=gen, dtype=torch.float64)
    seed = 17
    got = pac_bayes.gibbs_anchor_means(
        mean,
        0.3,
        2.0,
        (views, sample),
        4,
        loss,
        0.5,
        torch.Generator().manual_seed(seed),
        budget=3 * 4 * 6 * 5,
    )  # chunks of 3 anchors x 4 heads
    replay = torch.Generator().manual_seed(seed)
    expected = []
    for start in range(0, 11, 3):
        count = min(3, 11 - start)
        heads = pac_bayes.gibbs_heads(mean, 0.3, 2.0, count * 4, replay).reshape(count, 4, 3, 5)
        for k in range(count):
            one = sample.part(slice(start + k, start + k + 1))
            expected.append(
                float(
                    torch.stack(
                        [
                            learner.per_anchor_loss(h.float(), views, one, loss, 0.5)
                            for h in heads[k]
                        ]
                    ).mean()
                )
            )
    assert got.shape == (11,)
    assert torch.allclose(got, torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=1e-6)
