"""The clipped paired Gaussian: the clip, the clipped mass in closed form, and the bracket on
the clipped law's Bayes AUC."""

from __future__ import annotations

import math

import pytest
import torch

from crl.kernels.latent.canonical import CanonicalGaussian, excess_auc, sample_triples
from crl.kernels.latent.clipped import (
    clip_pairs,
    clip_triples,
    clipped_mass,
    radial_clip,
    scaled_reference,
)
from crl.kernels.score_model import PairedSample


def test_the_clip_puts_every_vector_in_the_unit_ball_and_scales_the_rest() -> None:
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(10_000, 4, dtype=torch.float64, generator=gen) * 2.0
    out = radial_clip(v, 3.0)
    norms = v.norm(dim=1)
    assert float(out.norm(dim=1).max()) <= 1.0 + 1e-12
    inside = norms <= 3.0
    assert torch.allclose(out[inside], v[inside] / 3.0)  # inside the ball: only scaled
    outside = ~inside
    assert torch.allclose(out[outside].norm(dim=1), torch.ones(int(outside.sum()), dtype=v.dtype))
    cos = (out[outside] * v[outside]).sum(1) / norms[outside]
    assert torch.allclose(cos, torch.ones_like(cos))  # the same direction
    sample = clip_pairs(PairedSample(v[:5], v[5:10], v[10:40].reshape(5, 6, 4)), 3.0)
    assert sample.negatives.shape == (5, 6, 4)
    assert float(sample.negatives.norm(dim=-1).max()) <= 1.0 + 1e-12


@pytest.mark.parametrize("radius", [0.5, 1.0, 2.5, 4.0])
def test_clipped_mass_against_the_chi_square_closed_forms(radius: float) -> None:
    t = radius * radius
    assert clipped_mass(2, radius) == pytest.approx(math.exp(-t / 2), rel=1e-12)
    assert clipped_mass(4, radius) == pytest.approx(math.exp(-t / 2) * (1 + t / 2), rel=1e-12)
    assert clipped_mass(1, radius) == pytest.approx(math.erfc(radius / math.sqrt(2)), rel=1e-10)


def test_clipped_mass_against_monte_carlo() -> None:
    gen = torch.Generator().manual_seed(1)
    v = torch.randn(400_000, 4, dtype=torch.float64, generator=gen)
    q = clipped_mass(4, 2.5)
    share = float((v.norm(dim=1) > 2.5).double().mean())
    assert abs(share - q) < 4 * math.sqrt(q * (1 - q) / v.shape[0])


def test_the_clipped_laws_bayes_auc_is_bracketed() -> None:
    """On common triples the Bayes score's hits change only where a vector was clipped, so
    |E_Q(s* read in Q's units) - E_P(s*)| is at most the share of clipped triples, whose
    expectation is at most 3 q_r."""
    model = CanonicalGaussian.make([0.9, 0.5, 0.3], True, torch.Generator().manual_seed(2))
    triples = sample_triples(model, 200_000, torch.Generator().manual_seed(3))
    radius, T = 2.0, 1.0
    star = model.bayes_parameters(T)
    gaussian = excess_auc(model, triples, *star, T)
    clipped = clip_triples(triples, radius)
    on_q = excess_auc(model, clipped, *star, T, reference=scaled_reference(star, radius))
    assert on_q.excess == pytest.approx(on_q.auc_star - on_q.auc)
    touched = torch.stack([t.norm(dim=1) > radius for t in (triples.x, triples.y, triples.y_neg)])
    share = float(touched.any(dim=0).double().mean())
    assert abs(on_q.auc_star - gaussian.auc_star) <= share + 1e-12
    q = clipped_mass(3, radius)
    assert share <= 3 * q + 4 * math.sqrt(3 * q / triples.x.shape[0])
    # the Gaussian's own score on unscaled-but-clipped points ranks exactly like the scaled one
    assert float(scaled_reference(star, radius)[0].norm()) == pytest.approx(
        radius**2 * float(star[0].norm())
    )
