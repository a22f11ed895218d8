"""crl.kernels.certified against docs/theory/bounds.md's formulas written out here in float64,
naive loops, Monte Carlo, exhaustive search and the seed's Gamma_M."""

from __future__ import annotations

import math

import pytest
import torch

from crl.kernels import bounds, certified, losses, rademacher

F64 = torch.float64
LN2 = math.log(2.0)


def _loss(loss: str, v: torch.Tensor, T: float) -> torch.Tensor:
    """psi(v) of (A4) with v_j = t_j - t_0, written from docs/theory/bounds.md, not from crl."""
    if loss == "hinge":
        return torch.clamp_min(1.0 + v.max(-1).values, 0.0)
    if loss == "logistic":
        zero = torch.zeros_like(v[..., :1])
        return torch.logsumexp(torch.cat([zero, v], -1), -1) / LN2
    if loss == "lse":
        return T * (torch.logsumexp(v / T, -1) - math.log(v.shape[-1]))
    zero = torch.zeros_like(v[..., :1])
    return torch.logsumexp(torch.cat([zero, v / T], -1), -1)


def _table1(loss: str, m: int, R: float, T: float) -> dict[str, float]:
    """Table 1 of docs/theory/bounds.md transcribed directly."""
    a = 2 * R * R
    if loss == "hinge":
        return {"lo": max(0.0, 1 - a), "B": 4 * R * R if a <= 1 else 1 + a, "L": 1.0, "w": 1.0}
    if loss == "logistic":
        return {
            "lo": math.log2(1 + m * math.exp(-a)),
            "B": math.log2((1 + m * math.exp(a)) / (1 + m * math.exp(-a))),
            "L": 1 / LN2,
            "w": 1 / (LN2**2 * (1 + m * math.exp(-2 * R * R))),
            "lip": m * math.exp(R * R) / ((m + 1) * LN2),
        }
    if loss == "lse":
        return {
            "lo": -a,
            "B": 4 * R * R,
            "L": 1.0,
            "w": 1 / (1 + (m - 1) * math.exp(-2 * R * R / T)),
            "lip": T * math.exp(R * R / T),
        }
    return {
        "lo": math.log(1 + m * math.exp(-a / T)),
        "B": math.log((1 + m * math.exp(a / T)) / (1 + m * math.exp(-a / T))),
        "L": 1 / T,
        "w": 1 / (T * T * (1 + m * math.exp(-2 * R * R / T))),
        "lip": m * math.exp(R * R / T) / (m + 1),
    }


CASES = [
    (loss, m, R, T)
    for loss in certified.LOSSES
    for m in (1, 4, 16)
    for (R, T) in ((1.0, 1.0), (2.0, 0.5), (0.5, 0.2))
]


@pytest.mark.parametrize(("loss", "m", "R", "T"), CASES)
def test_table1_constants(loss: str, m: int, R: float, T: float) -> None:
    c = certified.loss_constants(loss, m, R, T)
    ref = _table1(loss, m, R, T)
    assert c.psi_lo == pytest.approx(ref["lo"], rel=1e-12, abs=1e-12)
    assert c.B == pytest.approx(ref["B"], rel=1e-12)
    assert c.L == pytest.approx(ref["L"], rel=1e-15)
    assert c.omega == pytest.approx(ref["w"], rel=1e-12)
    if "lip" in ref:
        assert c.lip_mu == pytest.approx(ref["lip"], rel=1e-12)
    assert c.L_seed == (bounds.L0 if loss in ("hinge", "logistic") else c.L)


@pytest.mark.parametrize(("loss", "m", "R", "T"), CASES)
def test_range_is_attained_at_the_corners_and_holds_inside(
    loss: str, m: int, R: float, T: float
) -> None:
    """Lemma 1.1: psi in [psi_lo, psi_lo + B], ends at v = -a 1 and v = a 1; crl's own losses."""
    c = certified.loss_constants(loss, m, R, T)
    a = 2 * R * R
    corners = torch.tensor([[-a] * m, [a] * m], dtype=F64)
    ends = _loss(loss, corners, T)
    assert float(ends[0]) == pytest.approx(c.psi_lo, abs=1e-10)
    assert float(ends[1] - ends[0]) == pytest.approx(c.B, rel=1e-10)
    gen = torch.Generator().manual_seed(m)
    v = (2 * torch.rand(2000, m, generator=gen, dtype=F64) - 1) * a
    values = _loss(loss, v, T)
    assert float(values.min()) >= c.psi_lo - 1e-12 and float(values.max()) <= c.psi_lo + c.B + 1e-12
    # the same losses as crl's kernels (k-negative margins are -v)
    if loss in ("hinge", "logistic"):
        crl_values = losses.k_negative(-v, loss=loss)
    elif loss == "lse":
        crl_values = losses.lse_risk(torch.zeros(2000, dtype=F64), v, T, reduction="none")
    else:
        crl_values = losses.info_nce(torch.zeros(2000, dtype=F64), v, T, reduction="none")
    torch.testing.assert_close(crl_values, values, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("loss", "m", "R", "T"), CASES)
def test_gradient_constants_bound_every_gradient(loss: str, m: int, R: float, T: float) -> None:
    """Lemma 1.2: ||grad psi||_1 <= L and ||grad psi||_2^2 <= omega on reachable scores."""
    c = certified.loss_constants(loss, m, R, T)
    gen = torch.Generator().manual_seed(7 + m)
    t = (2 * torch.rand(4000, m + 1, generator=gen, dtype=F64) - 1) * R * R
    t[:50, 0], t[:50, 1:] = R * R, -R * R  # extreme: positive top, negatives bottom
    t[50:100, 0], t[50:100, 1:] = -R * R, R * R
    t[100, 0], t[100, 1:] = -R * R, -R * R  # one negative at the top, the rest at the bottom
    t[100, 1] = R * R
    v = (t[:, 1:] - t[:, :1]).requires_grad_(True)
    (g,) = torch.autograd.grad(_loss(loss, v, T).sum(), v)
    assert float(g.abs().sum(1).max()) <= c.L * (1 + 1e-12)
    assert float((g * g).sum(1).max()) <= c.omega * (1 + 1e-12)
    # omega = (max_j g_j) L, and the bound on max_j g_j is attained at row 100
    assert float(g[100].max()) == pytest.approx(c.omega / c.L, rel=1e-9)


def _h(loss: str, u: torch.Tensor, T: float) -> torch.Tensor:
    """h(u) = psi(v(u)), u = (a, b, c_1..c_m) stacked (..., m + 2, d) (Lemma 3.1)."""
    a, b, cs = u[..., 0, :], u[..., 1, :], u[..., 2:, :]
    v = torch.einsum("...d,...jd->...j", a, cs - b[..., None, :])
    return _loss(loss, v, T)


@pytest.mark.parametrize("loss", ["hinge", "lse"])
def test_lemma31_lipschitz_is_attained_but_never_exceeded(loss: str) -> None:
    """sqrt(6) L R is the Lipschitz constant of h on the ball: random search + ascent stays
    below it and comes within 1%; a wrong constant sqrt(2) L R (or sqrt(5)) is exceeded."""
    R, T, d = 1.3, 1.0, 3
    c = certified.loss_constants(loss, 1, R, T)
    gen = torch.Generator().manual_seed(3)
    u = torch.randn(256, 3, d, generator=gen, dtype=F64)
    u = u / u.norm(dim=-1, keepdim=True) * R
    u.requires_grad_(True)
    opt = torch.optim.Adam([u], lr=0.02)
    best = 0.0
    for _ in range(300):
        (g,) = torch.autograd.grad(_h(loss, u, T).sum(), u, create_graph=True)
        norms = g.flatten(1).norm(dim=1)
        best = max(best, float(norms.detach().max()))
        opt.zero_grad()
        (-norms.sum()).backward()
        opt.step()
        with torch.no_grad():  # back onto the ball B_R in every block
            u.mul_(torch.clamp(R / u.norm(dim=-1, keepdim=True), max=1.0))
    sharp = math.sqrt(6.0) * c.L * R
    assert best <= sharp * (1 + 1e-9)
    assert best >= 0.99 * sharp
    assert best > math.sqrt(5.0) * c.L * R > math.sqrt(2.0) * c.L * R


def _naive_stats(x, y, neg, shared):
    n, p = x.shape
    neg_full = neg.expand(n, *neg.shape) if shared else neg
    m = neg_full.shape[1]

    def sym(u, w):
        a = torch.outer(u, w)
        return (a + a.T) / 2

    sA = torch.zeros(p, p, dtype=F64)
    sN = torch.zeros(p, p, dtype=F64)
    s0 = torch.zeros(p, p, dtype=F64)
    for i in range(n):
        P = sym(x[i], y[i])
        s0 += P @ P
        for j in range(m):
            H = sym(x[i], neg_full[i, j] - y[i])
            G = sym(x[i], neg_full[i, j])
            sA += H @ H
            sN += G @ G

    def top(mat):
        return float(torch.linalg.eigvalsh(mat)[-1])

    S_pairs = float((x**2).sum() + (y**2).sum())
    return S_pairs, float((neg_full**2).sum()), top(sA), top(s0), top(sN)


@pytest.mark.parametrize("shared", [False, True])
def test_sample_stats_against_naive_loops(shared: bool) -> None:
    gen = torch.Generator().manual_seed(11)
    n, m, p = 9, 4, 5
    x, y = torch.randn(n, p, generator=gen, dtype=F64), torch.randn(n, p, generator=gen, dtype=F64)
    neg = torch.randn(*((m, p) if shared else (n, m, p)), generator=gen, dtype=F64)
    stats = certified.sample_stats(x, y, neg, shared, chunk=7)  # chunking across anchors
    ref = _naive_stats(x, y, neg, shared)
    got = (stats.S_pairs, stats.S_neg, stats.v_A, stats.v_0, stats.v_N)
    for a, b in zip(got, ref, strict=True):
        assert a == pytest.approx(b, rel=1e-12)
    assert (stats.n, stats.m, stats.p) == (n, m, p)


def _unit_rows(*shape: int, gen: torch.Generator) -> torch.Tensor:
    z = torch.randn(*shape, generator=gen, dtype=F64)
    return z / z.norm(dim=-1, keepdim=True) * torch.rand(*shape[:-1], 1, generator=gen, dtype=F64)


@pytest.mark.parametrize("loss", ["hinge", "logistic"])
@pytest.mark.parametrize("R", [0.4, 1.0, 2.0])
def test_gamma_m_at_one_negative_is_the_seeds_gamma(loss: str, R: float) -> None:
    gen = torch.Generator().manual_seed(5)
    n, p, d, delta = 40, 6, 3, 0.05
    x, y, neg = _unit_rows(n, p, gen=gen), _unit_rows(n, p, gen=gen), _unit_rows(n, 1, p, gen=gen)
    stats = certified.sample_stats(x, y, neg, shared=False)
    got = certified.gamma_m(stats, certified.loss_constants(loss, 1, R, 0.5), d, delta)
    closed_form_rs = R * math.sqrt(d * stats.S2)
    seed = bounds.saunshi_gamma(closed_form_rs, n, R, delta, loss)
    assert abs(got.value - seed.value) <= 1e-12 * seed.value
    assert got.complexity_term == pytest.approx(seed.rademacher_term, rel=1e-12)
    assert got.concentration_term == pytest.approx(seed.concentration_term, rel=1e-12)


def test_closed_form_rademacher_is_above_monte_carlo() -> None:
    """T4: R sqrt(d S2) >= E sup, measured with 4096 sign draws (and their CI)."""
    gen = torch.Generator().manual_seed(2)
    for rows, p, d in ((60, 8, 4), (300, 16, 2), (30, 3, 8)):
        phi = _unit_rows(rows, p, gen=gen)
        est = rademacher.linear(phi, d, 1.5, 4096, seed=rows)
        closed = 1.5 * math.sqrt(d * float((phi**2).sum()))
        assert est.value - est.ci <= closed
        assert est.value >= 0.9 * closed  # and Jensen is nearly tight


def test_gamma_s_routes_match_thm34() -> None:
    gen = torch.Generator().manual_seed(8)
    n, m, p, d, R, T, delta = 25, 3, 7, 4, 1.2, 0.7, 0.1
    x, y, neg = _unit_rows(n, p, gen=gen), _unit_rows(n, p, gen=gen), _unit_rows(n, m, p, gen=gen)
    stats = certified.sample_stats(x, y, neg, shared=False)
    for loss in certified.LOSSES:
        c = certified.loss_constants(loss, m, R, T)
        L, w = c.L, c.omega
        S_pairs, S_neg, vA, v0, vN = _naive_stats(x, y, neg, False)
        l2p = math.log(2 * p)
        expected = {
            "V": 2 * math.sqrt(3) * math.sqrt(6) * L * R**2 * math.sqrt(d * (S_pairs + S_neg)) / n,
            "Vw": 2
            * math.sqrt(3)
            * R**2
            * math.sqrt(d)
            * (L * math.sqrt(5 * S_pairs) + math.sqrt(w * S_neg))
            / n,
            "B1": 2 * math.sqrt(2) * L * R**2 * math.sqrt(2 * l2p * vA) / n,
            "B2": 2
            * math.sqrt(2)
            * R**2
            * math.sqrt(2 * l2p)
            * (L * math.sqrt(v0) + math.sqrt(w * vN))
            / n,
        }
        routes = certified.gamma_s_routes(stats, c, d)
        for k, v in expected.items():
            assert routes[k] == pytest.approx(v, rel=1e-12), (loss, k)
        cert = certified.gamma_s(stats, c, d, delta)
        conc = 3 * c.B * math.sqrt(math.log(4 / delta) / (2 * n))
        assert cert.value == pytest.approx(min(expected.values()) + conc, rel=1e-12)
        assert cert.route == min(expected, key=expected.get)


def test_gamma_e_routes_match_thm35_and_bound_every_sample() -> None:
    n, m, p, d, R, T, delta = 50, 16, 24, 8, 1.0, 1.0, 0.05
    for loss in certified.LOSSES:
        c = certified.loss_constants(loss, m, R, T)
        L, w, l2p = c.L, c.omega, math.log(2 * p)
        expected = {
            "V": 2 * math.sqrt(3) * math.sqrt(6) * L * R**2 * math.sqrt(d * (m + 2) / n),
            "Vw": 2
            * math.sqrt(3)
            * R**2
            * math.sqrt(d / n)
            * (math.sqrt(10) * L + math.sqrt(w * m)),
            "B1": 4 * math.sqrt(2) * math.sqrt(2) * L * R**2 * math.sqrt(l2p * m / n),
            "B2": 4 * R**2 * math.sqrt(l2p / n) * (L + math.sqrt(w * m)),
        }
        routes = certified.gamma_e_routes(n, m, p, c, d)
        for k, v in expected.items():
            assert routes[k] == pytest.approx(v, rel=1e-12), (loss, k)
        cert = certified.gamma_e(n, m, p, c, d, delta)
        conc = c.B * math.sqrt(math.log(2 / delta) / (2 * n))
        assert cert.value == pytest.approx(min(expected.values()) + conc, rel=1e-12)
        # on unit-norm rows every data-dependent route is below its data-free counterpart
        gen = torch.Generator().manual_seed(1)
        x, y = _unit_rows(n, p, gen=gen), _unit_rows(n, p, gen=gen)
        neg = _unit_rows(n, m, p, gen=gen)
        data_routes = certified.gamma_s_routes(certified.sample_stats(x, y, neg, False), c, d)
        for k in expected:
            assert data_routes[k] <= routes[k] * (1 + 1e-12), (loss, k)


def test_lse_inner_bound_against_exact_two_point_laws() -> None:
    """Thm 5.1: the exact bias T(log mu - E log mu_hat_m) of two-point laws never exceeds the
    bound, which is within a factor ~3 of the worst law (docs/theory/bounds.md 5.3)."""
    for R, T in ((1.0, 1.0), (0.5, 1.0), (1.0, 0.5)):
        alpha, beta = math.exp(-R * R / T), math.exp(R * R / T)
        for m in (1, 2, 4, 16):
            bound = certified.lse_inner_bound(m, R, T)
            worst = 0.0
            for q in torch.linspace(0.01, 0.99, 99, dtype=F64).tolist():
                k = torch.arange(m + 1, dtype=F64)
                logp = (
                    torch.lgamma(torch.tensor(m + 1.0, dtype=F64))
                    - torch.lgamma(k + 1)
                    - torch.lgamma(m - k + 1)
                    + k * math.log(q)
                    + (m - k) * math.log(1 - q)
                )
                mu_hat = (k * beta + (m - k) * alpha) / m
                mu = q * beta + (1 - q) * alpha
                bias = T * (math.log(mu) - float((logp.exp() * mu_hat.log()).sum()))
                assert -1e-12 <= bias <= bound * (1 + 1e-12)
                worst = max(worst, bias)
            if T == 1.0:  # docs/theory/bounds.md 5.3: within a factor ~3 of the worst law
                assert worst >= 0.3 * bound
    assert certified.lse_inner_bound(4, 2.0, 0.5) == pytest.approx(8.0)  # 2R^2 wins


def test_sscrl_inner_formula_and_hinge_has_none() -> None:
    delta = 0.025
    assert certified.sscrl_inner(certified.loss_constants("hinge", 4, 1.0, 1.0), delta) is None
    for loss, tau, cc in (("logistic", 1.0, 1 / LN2), ("lse", 0.5, 0.5), ("info_nce", 0.5, 1.0)):
        for m in (1, 16):
            R = 1.0
            c = certified.loss_constants(loss, m, R, 0.5)
            e = math.exp(R * R / tau)
            dm = 2 * R * R * e / (tau * math.sqrt(m)) + (e - 1 / e) * math.sqrt(
                math.log(2 / delta) / (2 * m)
            )
            bias = min(2 * cc * R * R / tau, cc * (e - 1) ** 2 / (2 * m))
            expected = c.lip_mu * dm + (0.0 if loss == "lse" else bias)
            assert certified.sscrl_inner(c, delta) == pytest.approx(expected, rel=1e-12)


def test_lse_inner_estimate_matches_the_delta_method() -> None:
    gen = torch.Generator().manual_seed(4)
    scores = torch.randn(30, 200, generator=gen, dtype=F64)
    T, m = 0.7, 8
    e = torch.exp(scores / T)
    expected = T / (2 * m) * float((e.var(dim=1) / e.mean(dim=1) ** 2).mean())
    assert certified.lse_inner_estimate(scores, m, T) == pytest.approx(expected, rel=1e-10)


def test_bad_arguments_name_themselves() -> None:
    with pytest.raises(ValueError, match="loss='square'"):
        certified.loss_constants("square", 1, 1.0, 1.0)
    with pytest.raises(ValueError, match="m=0"):
        certified.loss_constants("lse", 0, 1.0, 1.0)
    with pytest.raises(ValueError, match="negatives has shape"):
        x = torch.zeros(3, 2, dtype=F64)
        certified.sample_stats(x, x, torch.zeros(4, 2, 2, dtype=F64), shared=False)
