"""The names users and notebooks rely on stay reachable after the move to crl/kernels/."""

from __future__ import annotations

import importlib

import pytest

import crl

PUBLIC = {
    "losses": [
        "hinge",
        "logistic",
        "binary",
        "triplet_score",
        "one_negative",
        "k_negative",
        "k_negative_margins",
        "scores_own",
        "scores_shared",
        "lse_risk",
        "info_nce",
        "nt_xent",
        "shared_negatives_loss",
    ],
    "bounds": [
        "L0",
        "c0",
        "oscillation",
        "saunshi_gamma",
        "lemma51_gamma",
        "collision_term",
        "collision_upper",
        "transfer",
        "calibration_rhs",
        "RATE_SHAPES",
        "rate_basis",
        "rate_curve",
        "fit_rate",
        "fit_power",
        "critical_m",
        "critical_m_ci",
        "m_star_law",
        "sensitivity",
    ],
    "rademacher": [
        "signs",
        "linear",
        "spectral",
        "finite",
        "exact_linear",
        "exact_finite",
        "vector_contraction",
        "LinearAccumulator",
        "SignEstimate",
    ],
    "metrics": [
        "retrieval_auc",
        "mean_classifier",
        "linear_probe_accuracy",
        "calibration_gap",
        "mean_ci",
        "mean_ci_rows",
    ],
    "latent": [
        "LatentClassModel",
        "TwoModalityGaussian",
        "population",
        "population_mc",
        "uniform_prior",
        "zipf_prior",
        "CanonicalGaussian",
        "excess_auc",
        "sample_triples",
    ],
    "dense": [
        "dense_info_nce",
        "mi_lower_bound",
        "geometric_correspondence",
        "argmax_correspondence",
        "batch_pairs",
        "FeatureQueue",
        "momentum_update",
    ],
    "checks": ["STATEMENTS", "DEFAULT_INSTANCES", "Constants", "run_instance", "ROW_KEYS"],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_names_resolve_both_ways(module: str) -> None:
    """crl.<module>.<name> (lazy attribute) and `from crl.<module> import <name>` alike."""
    imported = importlib.import_module(f"crl.{module}")
    lazy = getattr(crl, module)
    for name in PUBLIC[module]:
        assert getattr(lazy, name) is getattr(imported, name), f"crl.{module}.{name}"


@pytest.mark.parametrize("module", ["losses", "bounds", "rademacher", "metrics", "latent", "dense"])
def test_aliases_export_exactly_the_kernels_public_names(module: str) -> None:
    alias = importlib.import_module(f"crl.{module}")
    assert set(PUBLIC[module]) <= set(alias.__all__)
    assert not [n for n in alias.__all__ if n.startswith("_")]
    for name in alias.__all__:
        assert hasattr(alias, name), f"crl.{module}.__all__ names {name} but it is missing"
