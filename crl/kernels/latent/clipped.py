"""The paired Gaussian radially clipped into the unit ball: a law with bounded support, so the
certified bounds of the paired class (crl.kernels.certified_paired: ||x||, ||y|| <= 1) apply.

A draw v ~ N(0, I_p) of either modality becomes c_r(v) = v min(1, r / ||v||) / r: clipped to the
ball of radius r, then scaled into the unit ball. The clipped law Q is the image of the Gaussian
P under c_r applied to x, y and every y'; it differs from P only where some vector was clipped,
an event of probability at most k q_r for a tuple of k vectors, with q_r = P(||v|| > r) =
P(chi2_p > r^2) = Q(p/2, r^2/2) (the regularised upper incomplete gamma function).

What that gives for retrieval on triples (x, y, y'): for any score s on Q's space,
|E_Q(s) - E_P(s o c_r)| <= 3 q_r, so Q's Bayes AUC E*_Q lies in [E*_P - 3 q_r, E*_P + 3 q_r]
(E*_P, the Gaussian's Bayes AUC, is attained by s*; s* o c_r^{-1} attains E*_P - 3 q_r or
better on Q). The Gaussian's Bayes score in Q's units is s*(r x, r y) = x^T (r^2 M*) y -
y^T (r^2 B*) y on the unclipped part.
"""

from __future__ import annotations

import torch

from crl.kernels import _validate
from crl.kernels.latent.canonical import Triples
from crl.kernels.score_model import PairedSample

__all__ = ["clip_pairs", "clip_triples", "clipped_mass", "radial_clip", "scaled_reference"]


def radial_clip(v: torch.Tensor, radius: float) -> torch.Tensor:
    """c_r(v) = v min(1, r / ||v||) / r on the last axis: every row in the unit ball.
    Shape: (..., p) -> (..., p), float64."""
    r = _validate.positive("radius", radius)
    v = v.to(torch.float64)
    norms = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
    return v * torch.clamp(r / norms.clamp_min(1e-300), max=1.0) / r


def clipped_mass(p: int, radius: float) -> float:
    """q_r = P(||v|| > r) for v ~ N(0, I_p): P(chi2_p > r^2) = Q(p/2, r^2/2)."""
    _validate.at_least("p", p, 1)
    r = _validate.positive("radius", radius)
    half = torch.tensor(p / 2.0, dtype=torch.float64)
    return float(torch.special.gammaincc(half, torch.tensor(r * r / 2.0, dtype=torch.float64)))


def clip_pairs(sample: PairedSample, radius: float) -> PairedSample:
    """Every x, y and negative of a sample through c_r."""
    return PairedSample(
        radial_clip(sample.x, radius),
        radial_clip(sample.y, radius),
        radial_clip(sample.negatives, radius),
    )


def clip_triples(triples: Triples, radius: float) -> Triples:
    """Every vector of the evaluation triples through c_r."""
    return Triples(*(radial_clip(t, radius) for t in (triples.x, triples.y, triples.y_neg)))


def scaled_reference(
    parameters: tuple[torch.Tensor, torch.Tensor], radius: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(r^2 M, r^2 B): the score x^T M y - y^T B y of P's units read in Q's units."""
    r2 = _validate.positive("radius", radius) ** 2
    return parameters[0] * r2, parameters[1] * r2
