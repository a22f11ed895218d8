"""Latent-class model of Saunshi et al. 2019 (docs/theory/statements.md section A): priors, model,
samplers.

Classes C ~ rho, inputs X ~ D_C; positive pairs share a class, a negative has a fresh class.
Representations f are callables mapping (..., D) -> (..., d), vectorised over leading dims.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch

from crl.kernels import _validate

Representation = Callable[[torch.Tensor], torch.Tensor]
_F64 = torch.float64


def uniform_prior(classes: int) -> torch.Tensor:
    """rho_c = 1 / C.  Shape: (C,) float64."""
    _validate.at_least("classes", classes, 1)
    return torch.full((classes,), 1.0 / classes, dtype=_F64)


def zipf_prior(classes: int, exponent: float = 1.0) -> torch.Tensor:
    """rho_c = c^{-s} / sum_k k^{-s} for c = 1..C, s = `exponent`.  Shape: (C,) float64."""
    _validate.at_least("classes", classes, 1)
    _validate.positive("exponent", exponent)
    weights = torch.arange(1, classes + 1, dtype=_F64).pow(-exponent)
    return weights / weights.sum()


class Triplets(NamedTuple):
    """One-negative triplets. Shape: x, x_pos, x_neg: (M, D); c, c_neg: (M,) int64."""

    x: torch.Tensor
    x_pos: torch.Tensor
    x_neg: torch.Tensor
    c: torch.Tensor
    c_neg: torch.Tensor


@dataclass(frozen=True, eq=False)
class Tuples:
    """Anchors with m negatives (Li et al. section B).

    Shape:
        anchors, positives: (n, D); anchor_classes: (n,).
        SCRL: negatives (n, m, D), negative_classes (n, m) -- fresh negatives per anchor.
        SSCRL: negatives (m, D), negative_classes (m,) -- one set shared by all anchors.
    """

    anchors: torch.Tensor
    positives: torch.Tensor
    negatives: torch.Tensor
    anchor_classes: torch.Tensor
    negative_classes: torch.Tensor


@dataclass(frozen=True, eq=False)
class LatentClassModel:
    """Class law rho and class-conditional laws D_c (Saunshi et al., Sec. 2).

    Either Gaussian: D_c = N(means[c], noise^2 I_D); or discrete: D_c puts mass
    support_probs[c, a] on the point support[c, a]. Tensors are stored as float64.

    Shape:
        prior: (C,) nonnegative, sums to 1. means: (C, D). support: (C, S, D).
        support_probs: (C, S) nonnegative rows summing to 1.
    """

    prior: torch.Tensor
    means: torch.Tensor | None = None
    noise: float | None = None
    support: torch.Tensor | None = None
    support_probs: torch.Tensor | None = None

    def __post_init__(self) -> None:
        prior = _validate.tensor("prior", self.prior).to(_F64)
        _validate.shape("prior", prior, "(C,) with C >= 1", prior.ndim == 1 and len(prior) > 0)
        _validate.probabilities("prior", prior)
        object.__setattr__(self, "prior", prior)
        gaussian = self.means is not None or self.noise is not None
        discrete = self.support is not None or self.support_probs is not None
        if gaussian == discrete:
            raise ValueError(
                "means/noise and support/support_probs: expected exactly one of the two pairs"
            )
        classes = len(prior)
        if gaussian:
            means = _validate.tensor("means", self.means).to(_F64)
            _validate.shape(
                "means", means, f"({classes}, D)", means.ndim == 2 and len(means) == classes
            )
            object.__setattr__(self, "means", means)
            object.__setattr__(self, "noise", _validate.positive("noise", self.noise))
        else:
            support = _validate.tensor("support", self.support).to(_F64)
            probs = _validate.tensor("support_probs", self.support_probs).to(_F64)
            _validate.shape(
                "support",
                support,
                f"({classes}, S, D)",
                support.ndim == 3 and len(support) == classes and support.shape[1] > 0,
            )
            _validate.shape(
                "support_probs",
                probs,
                f"{tuple(support.shape[:2])}",
                probs.shape == support.shape[:2],
            )
            _validate.probabilities("support_probs", probs)
            object.__setattr__(self, "support", support)
            object.__setattr__(self, "support_probs", probs)

    @classmethod
    def gaussian(cls, prior: torch.Tensor, means: torch.Tensor, noise: float) -> LatentClassModel:
        """D_c = N(means[c], noise^2 I).  Shape: prior (C,), means (C, D)."""
        return cls(prior=prior, means=means, noise=noise)

    @classmethod
    def discrete(
        cls, prior: torch.Tensor, support: torch.Tensor, support_probs: torch.Tensor
    ) -> LatentClassModel:
        """D_c = sum_a support_probs[c, a] delta_{support[c, a]}.

        Shape: prior (C,), support (C, S, D), support_probs (C, S).
        """
        return cls(prior=prior, support=support, support_probs=support_probs)

    @classmethod
    def synthetic(
        cls,
        classes: int,
        dim: int,
        separation: float,
        noise: float,
        generator: torch.Generator,
        prior: Literal["uniform", "zipf"] = "uniform",
        zipf_exponent: float = 1.0,
    ) -> LatentClassModel:
        """Gaussian model with means[c] = separation * u_c, u_c iid uniform on the unit sphere
        (normalised standard normals drawn from `generator`).  Shape: means (classes, dim).
        """
        _validate.at_least("classes", classes, 1)
        _validate.at_least("dim", dim, 1)
        _validate.positive("separation", separation)
        if prior == "uniform":
            rho = uniform_prior(classes)
        elif prior == "zipf":
            rho = zipf_prior(classes, zipf_exponent)
        else:
            raise ValueError(f"prior={prior!r}: expected 'uniform' or 'zipf'")
        directions = torch.randn(classes, dim, dtype=_F64, generator=_validate.generator(generator))
        directions = directions / directions.norm(dim=1, keepdim=True)
        return cls.gaussian(rho, separation * directions, noise)

    @property
    def kind(self) -> Literal["gaussian", "discrete"]:
        return "gaussian" if self.means is not None else "discrete"

    @property
    def classes(self) -> int:
        return len(self.prior)

    @property
    def dim(self) -> int:
        return self.means.shape[1] if self.means is not None else self.support.shape[2]

    @property
    def tau(self) -> float:
        """Collision probability tau = P(C+ = C-) = sum_c rho_c^2."""
        return self.prior.square().sum().item()

    def sample_classes(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """n iid classes C ~ rho.  Shape: (n,) int64."""
        _validate.at_least("n", n, 1)
        return torch.multinomial(
            self.prior, n, replacement=True, generator=_validate.generator(generator)
        )

    def sample_inputs(self, classes: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """X ~ D_c independently for each entry c of `classes`.

        Shape: classes (...) int64 with at least one entry -> (..., D) float64.
        """
        _validate.tensor("classes", classes)
        ok = classes.dtype == torch.int64 and classes.numel() > 0
        if not ok or classes.min() < 0 or classes.max() >= self.classes:
            raise ValueError(
                f"classes={classes!r}: expected a nonempty int64 tensor in [0, {self.classes})"
            )
        flat = classes.reshape(-1)  # N
        if self.means is not None:
            x = torch.randn(
                len(flat), self.dim, dtype=_F64, generator=_validate.generator(generator)
            )
            x.mul_(self.noise).add_(self.means[flat])  # N x D: mean + noise * eps, in place
        else:
            points = torch.multinomial(
                self.support_probs[flat], 1, generator=_validate.generator(generator)
            ).squeeze(1)  # N
            x = self.support[flat, points]  # N x D
        return x.reshape(*classes.shape, self.dim)

    def sample_triplets(self, count: int, generator: torch.Generator) -> Triplets:
        """M = `count` iid triplets: C, C- ~ rho; x, x+ ~ D_C; x- ~ D_{C-}."""
        c = self.sample_classes(count, generator)
        c_neg = self.sample_classes(count, generator)
        x = self.sample_inputs(c, generator)
        x_pos = self.sample_inputs(c, generator)
        return Triplets(x, x_pos, self.sample_inputs(c_neg, generator), c, c_neg)

    def sample_tuples(
        self, n: int, m: int, regime: Literal["scrl", "sscrl"], generator: torch.Generator
    ) -> Tuples:
        """n anchor/positive pairs and m negatives per anchor (SCRL) or m shared (SSCRL)."""
        _validate.at_least("m", m, 1)
        if regime not in ("scrl", "sscrl"):
            raise ValueError(f"regime={regime!r}: expected 'scrl' or 'sscrl'")
        c = self.sample_classes(n, generator)
        anchors = self.sample_inputs(c, generator)
        positives = self.sample_inputs(c, generator)
        count = n * m if regime == "scrl" else m
        c_neg = self.sample_classes(count, generator)
        if regime == "scrl":
            c_neg = c_neg.reshape(n, m)
        return Tuples(anchors, positives, self.sample_inputs(c_neg, generator), c, c_neg)
