"""Theorem checks (crl.checks): default constants hold, wrong constants are caught, rows are
well formed and deterministic."""

from __future__ import annotations

import json
import math
from functools import cache

import pytest
import torch
from scipy.stats import binomtest

from crl import checks, latent, losses
from crl.metrics import mean_ci, wilson_upper

FEW = (0, 1, 2)  # both parities: S3-S5 alternate exact (even) and Monte Carlo (odd) instances


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The kernels work on small tensors: one thread avoids oversubscription on shared CPUs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@cache
def _rows(statement: str, instance: int, seed: int = 0) -> tuple[dict, ...]:
    return tuple(checks.run_instance(statement, seed, instance))


def test_registry_and_default_counts() -> None:
    expected = {
        "S1_convex": 64,
        "S1_monotone": 64,
        "S1_lipschitz": 64,
        "S1_value_at_zero": 1,
        "S1_oscillation": 64,
        "S2_contraction": 400,
        "S3_lemma43": 80,
        "S4_decomposition": 80,
        "S5_collision": 80,
        "S6_lemma51": 200,
        "S7_coverage": 54,
        "LI_fisher_consistency": 30,
        "LI_calibration": 60,
        "DENSE_mi_bound": 60,
        "BOUNDS_gamma_S_coverage": 24,
        "BOUNDS_lse_inner": 30,
        "CERT_kl_inverse": 40,
        "CERT_gaussian_kl": 40,
        "CERT_monte_carlo": 12,
        "CERT_pac_bayes": 6,
        "CERT_excess_bound": 6,
    }
    # one decorator fills both dicts, in docs/theory/statements.md order
    assert list(checks.STATEMENTS) == list(expected)
    assert list(checks.DEFAULT_INSTANCES.items()) == list(expected.items())


def test_statement_registered_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="statement='S1_convex': registered twice"):
        checks.statement("S1_convex", instances=1)
    with pytest.raises(ValueError, match="instances=0"):
        checks.statement("S_new", instances=0)
    assert "S_new" not in checks.STATEMENTS


@pytest.mark.parametrize("statement", sorted(checks.STATEMENTS))
def test_default_constants_hold(statement: str) -> None:
    for instance in FEW:
        rows = _rows(statement, instance)
        assert rows
        failed = [row for row in rows if not row["holds"]]
        assert not failed, failed


@pytest.mark.parametrize("statement", sorted(checks.STATEMENTS))
def test_row_structure(statement: str) -> None:
    for instance in FEW:
        for row in _rows(statement, instance):
            assert tuple(row) == checks.ROW_KEYS
            assert row["statement"] == statement and row["instance"] == instance
            assert row["method"] in ("exact", "monte_carlo")
            assert isinstance(row["quantity"], str) and isinstance(row["note"], str)
            assert isinstance(json.loads(row["params"]), dict)
            assert isinstance(row["holds"], bool)
            for key in ("lhs", "rhs", "slack", "ci"):
                assert isinstance(row[key], float) and math.isfinite(row[key]), (key, row)
            assert row["ci"] >= 0
            if row["method"] == "exact":
                assert row["ci"] == 0.0
            gap = row["rhs"] - row["lhs"]
            assert row["slack"] == pytest.approx(gap) or row["slack"] == -abs(gap)


def test_methods_cover_exact_and_monte_carlo() -> None:
    for statement in ("S3_lemma43", "S4_decomposition", "S5_collision"):
        methods = {row["method"] for instance in FEW for row in _rows(statement, instance)}
        assert methods == {"exact", "monte_carlo"}


def test_deterministic_and_free_of_global_rng() -> None:
    for statement in ("S2_contraction", "S3_lemma43", "S7_coverage", "DENSE_mi_bound"):
        torch.manual_seed(123)
        first = checks.run_instance(statement, 7, 1)
        torch.manual_seed(456)
        second = checks.run_instance(statement, 7, 1)
        assert first == second
        assert checks.run_instance(statement, 7, 2)[0]["params"] != first[0]["params"]
        assert checks.run_instance(statement, 8, 1)[0]["params"] != first[0]["params"]


def test_wrong_contraction_constant_fails_s2() -> None:
    wrong = checks.Constants(contraction=0.5)
    rows = [r for i in range(48) for r in checks.run_instance("S2_contraction", 0, i, wrong)]
    assert any(not row["holds"] for row in rows)
    # the default sqrt(3) holds on the same instances
    assert all(r["holds"] for i in range(48) for r in checks.run_instance("S2_contraction", 0, i))


def test_wrong_calibration_factor_fails() -> None:
    rows = checks.run_instance("LI_calibration", 0, 0, checks.Constants(calibration_factor=1e-6))
    assert any(not row["holds"] for row in rows)


def test_zero_collision_constant_fails_where_collisions_cost() -> None:
    wrong = checks.Constants(collision_c0=0.0)
    failures = 0
    for instance in (0, 2, 4, 6):  # exact instances
        for row in checks.run_instance("S5_collision", 0, instance, wrong):
            s_f = float(row["note"].split("=")[1].split()[0])
            if row["quantity"].endswith("/upper") and s_f > 0 and row["lhs"] > 1 + 1e-9:
                assert not row["holds"], row
                failures += 1
            else:
                assert row["holds"], row
    assert failures > 0


def test_tiny_gamma_scale_fails_coverage() -> None:
    rows = checks.run_instance("S7_coverage", 0, 0, checks.Constants(gamma_scale=0.01))
    assert any(not row["holds"] for row in rows)
    # gamma_S is ~100x the sup-deviation: a scale of 0.003 takes it below
    rows = checks.run_instance("BOUNDS_gamma_S_coverage", 0, 0, checks.Constants(gamma_scale=0.003))
    assert not rows[0]["holds"] and rows[0]["rhs"] < 0.9


def test_lse_inner_bound_check_is_tight_enough_to_fail_when_wrong() -> None:
    """The exact inner error of a law with few hard negatives, against half the bound."""
    from crl.kernels import certified

    rows = [checks.run_instance("BOUNDS_lse_inner", 0, i)[1] for i in range(30)]
    assert all(r["holds"] for r in rows)
    ratios = [r["lhs"] / r["rhs"] for r in rows]
    assert max(ratios) < 1.0
    assert certified.lse_inner_bound(1, 1.0, 1.0) == pytest.approx(min(2.0, (math.e - 1) ** 2 / 2))


def test_wilson_upper_matches_scipy() -> None:
    z = checks.Constants().z
    for covered, trials in ((200, 200), (150, 200), (3, 10)):
        expected = binomtest(covered, trials).proportion_ci(0.9999, method="wilson").high
        assert wilson_upper(covered, trials, z) == pytest.approx(expected, rel=1e-9)


def test_calibration_closed_form_excess_matches_monte_carlo() -> None:
    """L(s* + t y^T B x) - L* = t^2 s^2 ||B||_F^2 / (2T), the rhs of LI_calibration, against a
    paired Monte Carlo estimate (the same x, y, y' for s* and s_t)."""
    gen = torch.Generator().manual_seed(5)
    model = latent.TwoModalityGaussian(torch.tensor([[0.8, -0.3], [0.2, 0.5]]), 0.7)
    B = torch.tensor([[0.6, 0.0], [0.0, -0.8]], dtype=torch.float64)  # ||B||_F = 1
    n, m = 2000, 2048
    x, y = model.sample_pairs(n, gen)
    y_neg = model.sample_negatives(n, m, gen)  # n x m x Dy
    x_neg = x[:, None, :].expand(n, m, 2)
    g_pos = torch.einsum("ni,ij,nj->n", y, B, x)
    g_neg = torch.einsum("nmi,ij,nmj->nm", y_neg, B, x_neg)
    for T, t in ((1.0, 0.5), (1.0, 1.0), (0.5, 0.5)):
        pos, neg = model.optimal_score(x, y, T), model.optimal_score(x_neg, y_neg, T)
        star = losses.lse_risk(pos, neg, T, reduction="none")
        moved = losses.lse_risk(pos + t * g_pos, neg + t * g_neg, T, reduction="none")
        diff, ci = mean_ci(moved - star, 0.999)
        closed = t * t * model.noise**2 / (2 * T)
        # both m-sample log-averages are biased low by O(1/m); their difference by much less
        assert abs(diff - closed) <= ci + 0.1 * closed, (T, t, diff, ci, closed)


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="statement='S9'"):
        checks.run_instance("S9", 0, 0)
    with pytest.raises(ValueError, match="instance=-1"):
        checks.run_instance("S1_convex", 0, -1)
    with pytest.raises(ValueError, match="confidence=1.0"):
        checks.Constants(confidence=1.0)
    with pytest.raises(ValueError, match="contraction=-1"):
        checks.Constants(contraction=-1.0)
    with pytest.raises(ValueError, match="constants is dict"):
        checks.run_instance("S1_convex", 0, 0, {"contraction": 1.0})


def test_the_certificate_statements_catch_a_bound_without_its_terms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the Monte Carlo term or Maurer's complexity term removed, coverage falls below
    1 - delta: the statements can fail."""
    from crl.kernels import pac_bayes

    monkeypatch.setattr(pac_bayes, "monte_carlo_upper", lambda mean, draws, delta: mean)
    rows = checks.run_instance("CERT_monte_carlo", 0, 1)
    assert not next(r for r in rows if r["quantity"] == "kl")["holds"]
    monkeypatch.setattr(pac_bayes, "pac_bayes_kl_bound", lambda q, kl, n, delta: q)
    assert not checks.run_instance("CERT_pac_bayes", 0, 1)[0]["holds"]
    # the excess bound as the draws' plain mean (no variance, Monte Carlo or PAC-Bayes term)
    monkeypatch.setattr(pac_bayes, "excess_bound", lambda x, kl, n, dp, dm: (float(x.mean()), 0.5))
    assert not checks.run_instance("CERT_excess_bound", 0, 1)[1]["holds"]
