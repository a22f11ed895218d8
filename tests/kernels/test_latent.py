"""Tests for crl.latent: exact enumeration, statements S3-S5 of docs/theory/statements.md, Monte
Carlo, closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from crl.latent import (
    LatentClassModel,
    TwoModalityGaussian,
    population,
    population_mc,
    uniform_prior,
    zipf_prior,
)
from crl.metrics import calibration_gap

F64 = torch.float64
L0 = 1.0 + 1.0 / math.log(2.0)
C0 = math.sqrt(2.0) * L0
LOSSES = {
    "hinge": lambda t: max(1.0 + t, 0.0),
    "logistic": lambda t: math.log2(1.0 + math.exp(t)),
}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _tanh_rep(d: int, dim: int, scale: float, seed: int):
    weight = torch.randn(d, dim, dtype=F64, generator=_gen(seed))
    return lambda x: scale * torch.tanh(x @ weight.T)


def _discrete(classes: int, points: int, dim: int, seed: int) -> LatentClassModel:
    g = _gen(seed)
    prior = torch.softmax(torch.randn(classes, dtype=F64, generator=g), 0)
    support = 2 * torch.randn(classes, points, dim, dtype=F64, generator=g)
    probs = torch.softmax(torch.randn(classes, points, dtype=F64, generator=g), 1)
    return LatentClassModel.discrete(prior, support, probs)


def _weights(draw, size: int) -> torch.Tensor:
    raw = draw(
        st.lists(
            st.one_of(st.just(0.0), st.floats(0.05, 1.0)), min_size=size, max_size=size
        ).filter(lambda w: sum(w) > 0)
    )
    w = torch.tensor(raw, dtype=F64)
    return w / w.sum()


@st.composite
def discrete_cases(draw):
    classes, points = draw(st.integers(2, 4)), draw(st.integers(1, 3))
    dim, d = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**31 - 1))
    prior = _weights(draw, classes)
    probs = torch.stack([_weights(draw, points) for _ in range(classes)])
    support = 2 * torch.randn(classes, points, dim, dtype=F64, generator=_gen(seed))
    model = LatentClassModel.discrete(prior, support, probs)
    f = _tanh_rep(d, dim, draw(st.floats(0.1, 3.0)), seed + 1)
    return model, f, draw(st.sampled_from(["hinge", "logistic"]))


@settings(max_examples=40, deadline=None)
@given(discrete_cases())
def test_theory_statements_s3_s4_s5(case) -> None:
    model, f, loss = case
    pop = population(model, f, loss)
    assert pop.tau == pytest.approx(float((model.prior**2).sum()), abs=1e-15)
    if pop.tau == 1.0:  # a single class has mass: L_un = L_un^=, no distinct pairs
        assert pop.L_un == pytest.approx(pop.L_un_eq, abs=1e-10)
        assert math.isnan(pop.L_sup_mu)
    else:
        # S4: L_un = tau L_un^= + (1 - tau) L_un^!=
        assert pop.L_un == pytest.approx(
            pop.tau * pop.L_un_eq + (1 - pop.tau) * pop.L_un_neq, abs=1e-10
        )
        # S3 (Lemma 4.3): L_sup^mu <= L_un^!=
        assert pop.L_sup_mu <= pop.L_un_neq + 1e-12
    # S5: 1 <= L_un^= <= 1 + c0 s(f)
    assert 1.0 - 1e-12 <= pop.L_un_eq <= 1.0 + C0 * pop.s_f + 1e-12
    assert float(pop.score_probs.sum()) == pytest.approx(1.0, abs=1e-12)


def _naive_population(model: LatentClassModel, f, loss: str, gamma: float):
    ell = LOSSES[loss]
    rho = model.prior.tolist()
    probs = model.support_probs.tolist()
    feats = f(model.support).tolist()  # C x S x d
    classes, points = len(rho), len(probs[0])

    def dot(u, v):
        return sum(a * b for a, b in zip(u, v, strict=True))

    total = same = distinct = 0.0
    for c in range(classes):
        for k in range(classes):
            for a in range(points):
                for b in range(points):
                    for e in range(points):
                        w = rho[c] * rho[k] * probs[c][a] * probs[c][b] * probs[k][e]
                        fa = feats[c][a]
                        value = w * ell(dot(fa, feats[k][e]) - dot(fa, feats[c][b]))
                        total += value
                        if c == k:
                            same += value
                        else:
                            distinct += value
    tau = sum(r * r for r in rho)
    d = len(feats[0][0])
    mu = [
        [sum(probs[c][a] * feats[c][a][t] for a in range(points)) for t in range(d)]
        for c in range(classes)
    ]

    def sup_risk(loss_fn):
        risk = 0.0
        for p in range(classes):
            for q in range(classes):
                if p == q:
                    continue
                w = [mu[p][t] - mu[q][t] for t in range(d)]
                plus = sum(probs[p][a] * loss_fn(-dot(w, feats[p][a])) for a in range(points))
                minus = sum(probs[q][a] * loss_fn(dot(w, feats[q][a])) for a in range(points))
                risk += rho[p] * rho[q] * (plus + minus) / 2
        return risk / (1 - tau)

    s_f = 0.0
    for c in range(classes):
        cov = np.zeros((d, d))
        for a in range(points):
            v = np.array(feats[c][a]) - np.array(mu[c])
            cov += probs[c][a] * np.outer(v, v)
        norm = sum(probs[c][a] * math.sqrt(dot(feats[c][a], feats[c][a])) for a in range(points))
        s_f += rho[c] ** 2 / tau * math.sqrt(np.linalg.norm(cov, 2)) * norm
    return {
        "L_un": total,
        "L_un_eq": same / tau,
        "L_un_neq": distinct / (1 - tau),
        "L_sup_mu": sup_risk(ell),
        "L_gamma_sup_mu": sup_risk(lambda t: max(1 + t / gamma, 0)),
        "s_f": s_f,
        "tau": tau,
        "mu": mu,
    }


@pytest.mark.parametrize("loss", ["hinge", "logistic"])
@pytest.mark.parametrize(
    ("classes", "points", "dim", "seed"), [(2, 1, 1, 0), (3, 2, 2, 1), (4, 3, 3, 2), (3, 3, 1, 3)]
)
def test_population_matches_naive_loop(loss, classes, points, dim, seed) -> None:
    model = _discrete(classes, points, dim, seed)
    f = _tanh_rep(2, dim, 1.5, seed + 10)
    pop = population(model, f, loss, gamma=0.7)
    ref = _naive_population(model, f, loss, gamma=0.7)
    for name in ["L_un", "L_un_eq", "L_un_neq", "L_sup_mu", "L_gamma_sup_mu", "s_f", "tau"]:
        assert getattr(pop, name) == pytest.approx(ref[name], rel=1e-12, abs=1e-14), name
    assert torch.allclose(pop.mu, torch.tensor(ref["mu"], dtype=F64), rtol=1e-12, atol=1e-14)
    ell = {"hinge": lambda t: (1 + t).clamp(min=0), "logistic": lambda t: torch.log2(1 + t.exp())}
    assert float((pop.score_probs * ell[loss](pop.scores)).sum()) == pytest.approx(ref["L_un"])


def test_priors_and_tau() -> None:
    assert torch.allclose(uniform_prior(4), torch.full((4,), 0.25, dtype=F64))
    z = zipf_prior(3, 2.0)
    ref = torch.tensor([1.0, 1 / 4, 1 / 9], dtype=F64)
    assert torch.allclose(z, ref / ref.sum())
    model = LatentClassModel.gaussian(z, torch.zeros(3, 2), 1.0)
    assert model.tau == pytest.approx(float((z**2).sum()))
    trip = model.sample_triplets(200_000, _gen(0))
    empirical = (trip.c == trip.c_neg).double().mean().item()
    assert empirical == pytest.approx(model.tau, abs=4e-3)
    assert torch.bincount(trip.c, minlength=3).double().div(200_000).sub(z).abs().max() < 4e-3


@pytest.mark.parametrize("kind", ["gaussian", "discrete"])
def test_sampling_shapes_and_reproducibility(kind: str) -> None:
    if kind == "gaussian":
        model = LatentClassModel.synthetic(3, 4, 2.0, 0.5, _gen(0), prior="zipf")
    else:
        model = _discrete(3, 2, 4, 0)
    trip = model.sample_triplets(5, _gen(1))
    assert [t.shape for t in trip] == [(5, 4)] * 3 + [(5,)] * 2
    again = model.sample_triplets(5, _gen(1))
    assert all(torch.equal(a, b) for a, b in zip(trip, again, strict=True))
    assert not torch.equal(trip.x, model.sample_triplets(5, _gen(2)).x)
    scrl = model.sample_tuples(6, 3, "scrl", _gen(1))
    assert scrl.anchors.shape == scrl.positives.shape == (6, 4)
    assert scrl.negatives.shape == (6, 3, 4) and scrl.negative_classes.shape == (6, 3)
    sscrl = model.sample_tuples(6, 3, "sscrl", _gen(1))
    assert sscrl.negatives.shape == (3, 4) and sscrl.negative_classes.shape == (3,)
    assert sscrl.anchor_classes.shape == (6,)
    if kind == "discrete":  # samples lie on the support of their class
        x = scrl.negatives.reshape(-1, 4)
        pts = model.support[scrl.negative_classes.reshape(-1)]  # N x S x D
        assert ((pts - x[:, None]).abs().amax(-1) == 0).any(-1).all()


def test_synthetic_is_deterministic() -> None:
    a = LatentClassModel.synthetic(5, 3, 2.5, 0.3, _gen(7))
    b = LatentClassModel.synthetic(5, 3, 2.5, 0.3, _gen(7))
    assert torch.equal(a.means, b.means)
    assert torch.allclose(a.means.norm(dim=1), torch.full((5,), 2.5, dtype=F64))
    assert (a.kind, a.classes, a.dim, a.noise) == ("gaussian", 5, 3, 0.3)


def _hinge_of_normal(mean: float, sd: float) -> float:
    """E max(1 + Z, 0) for Z ~ N(mean, sd^2)."""
    if sd == 0:
        return max(1 + mean, 0.0)
    u = (1 + mean) / sd
    return (1 + mean) * stats.norm.cdf(u) + sd * stats.norm.pdf(u)


def test_population_mc_gaussian_identity_matches_analytic() -> None:
    """D = 1, f = identity, hinge: every quantity reduces to 1-d Gaussian integrals."""
    means, sigma = [-1.0, 0.5, 2.0], 0.7
    prior = zipf_prior(3, 1.0)
    model = LatentClassModel.gaussian(prior, torch.tensor(means)[:, None], sigma)
    est = population_mc(model, lambda x: x, "hinge", 100_000, _gen(3), gamma=2.0)
    rho = prior.tolist()
    tau = sum(r * r for r in rho)

    def pair_risk(c: int, k: int) -> float:
        # q | x ~ N(x (m_k - m_c), 2 sigma^2 x^2) with x ~ N(m_c, sigma^2)
        def integrand(x: float) -> float:
            inner = _hinge_of_normal(x * (means[k] - means[c]), math.sqrt(2) * sigma * abs(x))
            return stats.norm.pdf(x, means[c], sigma) * inner

        return integrate.quad(integrand, means[c] - 12 * sigma, means[c] + 12 * sigma)[0]

    risk = [[pair_risk(c, k) for k in range(3)] for c in range(3)]
    eq = sum(rho[c] ** 2 * risk[c][c] for c in range(3)) / tau
    neq = sum(rho[c] * rho[k] * risk[c][k] for c in range(3) for k in range(3) if c != k)
    neq /= 1 - tau

    def sup(scale: float) -> float:
        total = 0.0
        for p in range(3):
            for q in range(3):
                if p != q:
                    delta = (means[q] - means[p]) / scale
                    half = _hinge_of_normal(means[p] * delta, sigma * abs(delta))
                    total += rho[p] * rho[q] * half  # (p, q) and (q, p) halves sum over pairs
        return total / (1 - tau)

    def abs_mean(m: float) -> float:
        return sigma * math.sqrt(2 / math.pi) * math.exp(-(m**2) / (2 * sigma**2)) + m * (
            1 - 2 * stats.norm.cdf(-m / sigma)
        )

    s_f = sum(rho[c] ** 2 / tau * sigma * abs_mean(means[c]) for c in range(3))
    exact = {
        "L_un": tau * eq + (1 - tau) * neq,
        "L_un_eq": eq,
        "L_un_neq": neq,
        "L_sup_mu": sup(1.0),
        "L_gamma_sup_mu": sup(2.0),
        "s_f": s_f,
        "tau": tau,
    }
    for name, value in exact.items():
        assert abs(getattr(est, name) - value) <= 2 * getattr(est, f"{name}_ci"), name
    assert ((est.mu[:, 0] - torch.tensor(means, dtype=F64)).abs() <= 2 * est.mu_ci[:, 0]).all()


@pytest.mark.parametrize("loss", ["hinge", "logistic"])
def test_population_mc_discrete_matches_exact(loss: str) -> None:
    model = _discrete(3, 3, 2, 5)
    f = _tanh_rep(3, 2, 1.2, 6)
    pop = population(model, f, loss, gamma=0.5)
    est = population_mc(model, f, loss, 60_000, _gen(8), gamma=0.5)
    for name in ["L_un", "L_un_eq", "L_un_neq", "L_sup_mu", "L_gamma_sup_mu", "s_f", "tau"]:
        assert abs(getattr(est, name) - getattr(pop, name)) <= 2 * getattr(est, f"{name}_ci"), name
    assert ((est.mu - pop.mu).abs() <= 2 * est.mu_ci + 1e-12).all()


def test_latent_bad_inputs() -> None:
    with pytest.raises(ValueError, match="prior="):
        LatentClassModel.gaussian(torch.tensor([0.5, 0.6]), torch.zeros(2, 1), 1.0)
    with pytest.raises(ValueError, match="means has shape"):
        LatentClassModel.gaussian(uniform_prior(2), torch.zeros(3, 1), 1.0)
    with pytest.raises(ValueError, match="noise=0"):
        LatentClassModel.gaussian(uniform_prior(2), torch.zeros(2, 1), 0.0)
    with pytest.raises(ValueError, match="support_probs has shape"):
        LatentClassModel.discrete(uniform_prior(2), torch.zeros(2, 3, 1), torch.ones(2, 2) / 2)
    with pytest.raises(ValueError, match="exactly one"):
        LatentClassModel(prior=uniform_prior(2))
    with pytest.raises(ValueError, match="prior='flat'"):
        LatentClassModel.synthetic(2, 2, 1.0, 1.0, _gen(0), prior="flat")
    model = _discrete(2, 2, 2, 0)
    with pytest.raises(ValueError, match="generator is int"):
        model.sample_classes(3, 0)
    with pytest.raises(ValueError, match="regime='simclr'"):
        model.sample_tuples(2, 2, "simclr", _gen(0))
    with pytest.raises(ValueError, match="classes="):
        model.sample_inputs(torch.tensor([0, 2]), _gen(0))
    with pytest.raises(ValueError, match="loss='l2'"):
        population(model, lambda x: x, "l2")
    with pytest.raises(ValueError, match="f\\(x\\) has shape"):
        population(model, lambda x: x.sum(), "hinge")
    gaussian = LatentClassModel.synthetic(2, 2, 1.0, 1.0, _gen(0))
    with pytest.raises(ValueError, match="expected a discrete model"):
        population(gaussian, lambda x: x, "hinge")
    single = LatentClassModel.gaussian(torch.tensor([1.0, 0.0]), torch.zeros(2, 1), 1.0)
    with pytest.raises(ValueError, match="at least two classes"):
        population_mc(single, lambda x: x, "hinge", 1000, _gen(0))


TWO = TwoModalityGaussian(torch.tensor([[0.8, 0.2], [0.0, 0.5], [0.3, -0.4]]), 0.9)
TEMP = 0.5


def _optimal(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return TWO.optimal_score(x, y, TEMP)


def test_optimal_score_is_log_density_ratio() -> None:
    x, y = TWO.sample_pairs(20, _gen(0))
    a, s = TWO.transform.numpy(), TWO.noise
    cov = a @ a.T + s**2 * np.eye(3)
    ref = [
        TEMP
        * (
            stats.multivariate_normal(a @ xi, s**2 * np.eye(3)).logpdf(yi)
            - stats.multivariate_normal(np.zeros(3), cov).logpdf(yi)
        )
        for xi, yi in zip(x.numpy(), y.numpy(), strict=True)
    ]
    assert torch.allclose(_optimal(x, y), torch.tensor(ref, dtype=F64), rtol=1e-10, atol=1e-12)
    assert TWO.mutual_information == pytest.approx(
        0.5 * np.linalg.slogdet(cov)[1] - 3 * math.log(s), rel=1e-12
    )


def test_optimal_lse_closed_form_vs_monte_carlo() -> None:
    l_star = TWO.optimal_lse(TEMP)
    x, y = TWO.sample_pairs(200_000, _gen(1))
    direct = -_optimal(x, y)  # L* = -E s*(x, y) = -T I(X; Y)
    mean, half = direct.mean().item(), 1.96 * direct.std().item() / math.sqrt(len(direct))
    assert abs(mean - l_star) <= 2 * half
    est = TWO.population_lse(_optimal, TEMP, 4000, 2000, _gen(2))
    # Inner-average bias T Var(Z) / (2 m E[Z]^2) is below 1e-3 here; allow it on top of the CI.
    assert abs(est.value - l_star) <= 2 * est.ci + 1e-3


def test_population_lse_and_auc_match_naive_loop_on_same_draws() -> None:
    n, m = 30, 7
    g = _gen(5)
    x, y = TWO.sample_pairs(n, g)
    y_neg = TWO.sample_negatives(n, m, g)
    per_anchor = []
    for i in range(n):
        pos = _optimal(x[i], y[i]).item()
        inner = sum(math.exp((_optimal(x[i], y_neg[i, j]).item() - pos) / TEMP) for j in range(m))
        per_anchor.append(TEMP * math.log(inner / m))
    mean = sum(per_anchor) / n
    half = 1.959963984540054 * float(np.std(per_anchor, ddof=1)) / math.sqrt(n)
    est = TWO.population_lse(_optimal, TEMP, n, m, _gen(5))
    assert (est.value, est.ci) == pytest.approx((mean, half), rel=1e-10)
    g = _gen(6)
    x, y = TWO.sample_pairs(n, g)
    y_neg = TWO.sample_negatives(n, 1, g)[:, 0]
    hits = [float(_optimal(x[i], y[i]) > _optimal(x[i], y_neg[i])) for i in range(n)]
    assert TWO.population_auc(_optimal, n, _gen(6)).value == pytest.approx(sum(hits) / n)


def test_optimal_score_maximises_auc_and_calibration_holds() -> None:
    a = TWO.transform
    perturbed = {
        "bilinear": lambda x, y: (y * (x @ a.T)).sum(-1),
        "norm_bonus": lambda x, y: _optimal(x, y) + y.square().sum(-1),
        "reversed": lambda x, y: -_optimal(x, y),
    }
    auc_opt = TWO.population_auc(_optimal, 100_000, _gen(3))
    l_star = TWO.optimal_lse(TEMP)
    for name, score in perturbed.items():
        auc = TWO.population_auc(score, 100_000, _gen(3))  # common random numbers
        assert auc.value < auc_opt.value, name
        lse = TWO.population_lse(score, TEMP, 2000, 500, _gen(4))
        assert lse.value > l_star, name
        gap = calibration_gap(auc_opt.value, auc.value, lse.value + lse.ci, l_star, TEMP)
        assert gap.lhs - auc_opt.ci - auc.ci <= gap.rhs, name


def test_two_modality_shapes_and_errors() -> None:
    x, y = TWO.sample_pairs(4, _gen(0))
    assert x.shape == (4, 2) and y.shape == (4, 3)
    assert TWO.sample_negatives(4, 5, _gen(0)).shape == (4, 5, 3)
    assert torch.equal(TWO.sample_negatives(4, 5, _gen(0)), TWO.sample_negatives(4, 5, _gen(0)))
    with pytest.raises(ValueError, match="score_fn"):
        TWO.population_auc(lambda x, y: y, 10, _gen(0))
    with pytest.raises(ValueError, match="noise=-1"):
        TwoModalityGaussian(torch.eye(2), -1.0)
    with pytest.raises(ValueError, match="temperature=0"):
        TWO.optimal_lse(0.0)
