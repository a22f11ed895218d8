"""crl.bounds: hand-computed values, properties (hypothesis), exact recovery by the rate fits."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from crl import bounds, losses

LN2 = math.log(2.0)


def ref_loss(loss: str, t: float) -> float:
    """The source losses, transcribed: hinge max(1 + t, 0), logistic log2(1 + e^t)."""
    return max(1.0 + t, 0.0) if loss == "hinge" else math.log2(1.0 + math.exp(t))


def _grid() -> tuple[np.ndarray, np.ndarray]:
    m, n = np.meshgrid([1.0, 2.0, 4.0, 16.0, 64.0, 256.0], [100.0, 400.0, 1600.0, 6400.0])
    return m.ravel(), n.ravel()


# ---- section A ----


def test_constants() -> None:
    assert bounds.L0 == pytest.approx(1 + 1 / LN2, rel=1e-15)
    assert bounds.c0 == pytest.approx(math.sqrt(2) * (1 + 1 / LN2), rel=1e-15)


@pytest.mark.parametrize("loss", losses.BINARY_LOSSES)
@pytest.mark.parametrize("R", [0.1, 0.5, 1 / math.sqrt(2), 1.0, 2.0, 3.0])
def test_oscillation_matches_loss_definition(loss: str, R: float) -> None:
    expected = ref_loss(loss, 2 * R**2) - ref_loss(loss, -2 * R**2)
    assert bounds.oscillation(loss, R) == pytest.approx(expected, rel=1e-12)


def test_oscillation_hand_values() -> None:
    assert bounds.oscillation("hinge", 0.5) == pytest.approx(1.0)  # 1.5 - 0.5
    assert bounds.oscillation("hinge", 1.0) == pytest.approx(3.0)  # 3 - 0
    assert bounds.oscillation("logistic", 1.0) == pytest.approx(2 / LN2)


@settings(max_examples=200, deadline=None)
@given(R=st.floats(1e-6, 1e6), loss=st.sampled_from(losses.BINARY_LOSSES))
def test_oscillation_is_positive_and_at_most_4_L0_R2(R: float, loss: str) -> None:
    B = bounds.oscillation(loss, R)
    assert 0 < B <= 4 * bounds.L0 * R**2 * (1 + 1e-12)


@pytest.mark.parametrize("loss", losses.BINARY_LOSSES)
def test_saunshi_gamma_terms(loss: str) -> None:
    gamma = bounds.saunshi_gamma(rademacher=120.0, n=500, R=1.5, delta=0.05, loss=loss)
    rad = 2 * math.sqrt(18) * (1 + 1 / LN2) * 1.5 * 120.0 / 500
    conc = 3 * bounds.oscillation(loss, 1.5) * math.sqrt(math.log(4 / 0.05) / 1000)
    assert gamma.rademacher_term == pytest.approx(rad, rel=1e-14)
    assert gamma.concentration_term == pytest.approx(conc, rel=1e-14)
    assert gamma.value == pytest.approx(rad + conc, rel=1e-14)


def test_saunshi_gamma_hand_value() -> None:
    # hinge, R = 1: B = 3; rademacher 0 leaves 3 * 3 * sqrt(ln(4 / 0.5) / 2)
    gamma = bounds.saunshi_gamma(0.0, 1, 1.0, 0.5, "hinge")
    assert gamma.value == pytest.approx(9 * math.sqrt(math.log(8) / 2), rel=1e-14)
    assert gamma.rademacher_term == 0.0


def test_lemma51_branches() -> None:
    assert bounds.lemma51_gamma(2.0, 0.5, 0.1) == pytest.approx(
        1 + 2 * 2.0 * 0.5 * math.sqrt(2 * math.log(2.0) + math.log(30.0))
    )
    assert bounds.lemma51_gamma(0.5, 0.5, 0.1) == pytest.approx(
        1 + 2 * 0.5 * 0.5 * math.sqrt(math.log(30.0))
    )
    # the branches meet at R = 1, where 2 ln R = 0
    assert bounds.lemma51_gamma(1.0, 0.3, 1.0) == pytest.approx(1 + 0.6 * math.sqrt(math.log(3)))
    assert bounds.lemma51_gamma(1.0 - 1e-12, 0.3, 1.0) == pytest.approx(
        bounds.lemma51_gamma(1.0, 0.3, 1.0), rel=1e-9
    )
    assert bounds.lemma51_gamma(3.0, 0.0, 0.5) == 1.0


def test_collision_term_and_upper() -> None:
    op = torch.tensor([4.0, 1.0, 0.0])
    mean = torch.tensor([2.0, 3.0, 5.0])
    nu = torch.tensor([0.5, 0.25, 0.25])
    s = bounds.collision_term(op, mean, nu)
    assert s == pytest.approx(0.5 * 2 * 2 + 0.25 * 1 * 3 + 0.0)
    assert bounds.collision_upper(s) == pytest.approx(1 + math.sqrt(2) * (1 + 1 / LN2) * s)
    assert bounds.collision_upper(0.0) == 1.0


def test_transfer_and_calibration() -> None:
    assert bounds.transfer(1.2, 0.2) == pytest.approx(1.0 / 0.8)
    assert bounds.transfer(0.7, 0.0) == 0.7
    assert bounds.calibration_rhs(1.5, 1.0, 0.25) == pytest.approx(math.sqrt(8 * 0.5))
    assert bounds.calibration_rhs(1.0, 1.0, 0.1) == 0.0


# ---- section B: rate shapes and fits ----


def test_rate_basis_columns() -> None:
    m, n = np.array([1.0, 4.0]), np.array([100.0, 25.0])
    expected = {
        "scrl": [[1, 1, 0.1], [1, 0.25, 0.2]],
        "sscrl": [[1, 1, 0.1], [1, 0.5, 0.2]],
        "lei": [[1, math.log(2) / 10], [1, math.log(5) / 5]],
        "saunshi_k": [[1, 0.1], [1, 0.8]],
    }
    for shape, rows in expected.items():
        basis = bounds.rate_basis(shape, m, n)
        assert basis.dtype == np.float64
        np.testing.assert_allclose(basis, np.array(rows, dtype=np.float64), rtol=1e-15)


@pytest.mark.parametrize(
    ("shape", "coefs"),
    [
        ("scrl", {"c": 0.05, "a": 0.8, "b": 2.0}),
        ("sscrl", {"c": -0.1, "a": 0.3, "b": 1.5}),
        ("lei", {"c": 0.2, "a": 0.7}),
        ("saunshi_k", {"c": 0.01, "a": 0.04}),
        ("scrl", {"c": 0.3, "a": 0.0, "b": 1.0}),  # a slope at the boundary
    ],
)
def test_fit_rate_recovers_noiseless_coefficients(shape: str, coefs: dict[str, float]) -> None:
    m, n = _grid()
    gap = bounds.rate_curve(shape, coefs, m, n)
    fit = bounds.fit_rate(shape, m, n, gap)
    assert fit.shape == shape and fit.n_points == m.size
    assert set(fit.coefs) == set(coefs)
    for name, value in coefs.items():
        assert fit.coefs[name] == pytest.approx(value, abs=1e-10)
    assert fit.rss < 1e-20 and fit.rmse < 1e-10 and fit.r2 == pytest.approx(1.0)


def test_fit_rate_keeps_slopes_nonnegative() -> None:
    m, n = _grid()
    gap = 1.0 - 0.5 / m  # rising in m: the best unconstrained slope on 1/m is negative
    fit = bounds.fit_rate("scrl", m, n, gap)
    assert fit.coefs["a"] == 0.0 and fit.coefs["b"] >= 0.0
    assert fit.r2 < 1.0


@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 0.5), (0.5, 0.5), (1.5, 1.0)])
def test_fit_power_recovers_exponents(alpha: float, beta: float) -> None:
    m, n = _grid()
    gap = 0.1 + 2.0 * m**-alpha + 3.0 * n**-beta
    fit = bounds.fit_power(m, n, gap)
    assert fit.alpha == pytest.approx(alpha, rel=1e-6)
    assert fit.beta == pytest.approx(beta, rel=1e-6)
    assert fit.coefs["a"] == pytest.approx(2.0, rel=1e-6)
    assert fit.coefs["b"] == pytest.approx(3.0, rel=1e-5)
    assert fit.coefs["c"] == pytest.approx(0.1, abs=1e-6)
    assert fit.r2 == pytest.approx(1.0) and fit.n_points == m.size
    assert bounds.fit_power(m, n, gap) == fit  # deterministic


# ---- bad inputs ----


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: bounds.oscillation("hinge", 0.0), "R=0.0"),
        (lambda: bounds.oscillation("hinge", -1.0), "R=-1.0"),
        (lambda: bounds.oscillation("square", 1.0), "loss='square'"),
        (lambda: bounds.saunshi_gamma(1.0, 10, 1.0, 0.0, "hinge"), "delta=0.0"),
        (lambda: bounds.saunshi_gamma(1.0, 10, 1.0, 1.0, "hinge"), "delta=1.0"),
        (lambda: bounds.saunshi_gamma(1.0, 0, 1.0, 0.1, "hinge"), "n=0"),
        (lambda: bounds.saunshi_gamma(-1.0, 10, 1.0, 0.1, "hinge"), "rademacher=-1.0"),
        (lambda: bounds.saunshi_gamma(1.0, 10, 0.0, 0.1, "hinge"), "R=0.0"),
        (lambda: bounds.lemma51_gamma(1.0, 1.0, 0.0), "eps=0.0"),
        (lambda: bounds.lemma51_gamma(1.0, 1.0, 1.5), "eps=1.5"),
        (lambda: bounds.lemma51_gamma(1.0, -0.1, 0.5), "sigma=-0.1"),
        (lambda: bounds.lemma51_gamma(0.0, 1.0, 0.5), "R=0.0"),
        (
            lambda: bounds.collision_term(torch.ones(2), torch.ones(3), torch.ones(2) / 2),
            "mean_norms has shape",
        ),
        (lambda: bounds.collision_term(torch.ones(2), torch.ones(2), torch.ones(2)), "nu sums"),
        (
            lambda: bounds.collision_term(-torch.ones(2), torch.ones(2), torch.ones(2) / 2),
            "op_norms=",
        ),
        (lambda: bounds.collision_upper(-1.0), "s=-1.0"),
        (lambda: bounds.transfer(1.0, 1.0), "tau=1.0"),
        (lambda: bounds.calibration_rhs(0.5, 1.0, 0.1), "L_s=0.5"),
        (lambda: bounds.calibration_rhs(1.5, 1.0, 0.0), "temperature=0.0"),
        (lambda: bounds.rate_basis("cubic", [1.0], [1.0]), "shape='cubic'"),
        (lambda: bounds.rate_basis("scrl", [0.0], [1.0]), "m="),
        (lambda: bounds.rate_basis("scrl", [1.0, 2.0], [1.0]), "m has shape"),
        (lambda: bounds.rate_curve("lei", {"c": 1.0}, [1.0], [1.0]), "coefs has keys"),
        (lambda: bounds.fit_rate("scrl", [1.0, 2.0], [4.0, 4.0], [0.1, 0.2]), "at least 3"),
        (lambda: bounds.fit_rate("lei", [1.0, 2.0], [4.0, 4.0], [0.1, np.nan]), "gap has"),
        (lambda: bounds.fit_power([1.0] * 4, [4.0] * 4, [0.1] * 4), "at least 5"),
    ],
)
def test_bad_inputs(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_kernel_modules_import_neither_prefect_nor_ray() -> None:
    code = (
        "import sys, crl.bounds, crl.rademacher; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('prefect', 'ray')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
