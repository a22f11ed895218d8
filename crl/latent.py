"""Latent-class model (Saunshi et al. 2019) and two-modality Gaussian (Li et al. 2026).

THEORY.md section A: classes C ~ rho, inputs X ~ D_C; positive pairs share a class, a negative
has a fresh class. Exact population risks for finite-support class laws, Monte Carlo estimates
with confidence intervals for any class law. THEORY.md section B: a Gaussian pair (X, Y) whose
optimal score, minimal LSE risk and AUC have closed forms or direct estimators.

Representations f are callables mapping (..., D) -> (..., d), vectorised over leading dims.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch

from crl import _validate
from crl.losses import binary
from crl.metrics import mean_ci, mean_ci_rows

Representation = Callable[[torch.Tensor], torch.Tensor]
ScoreFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Loss = Callable[[torch.Tensor], torch.Tensor]
_F64 = torch.float64


def _generator(generator: object) -> torch.Generator:
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator is {type(generator).__name__}: expected a torch.Generator")
    return generator


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
        _probabilities("prior", prior)
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
                "support", support, f"({classes}, S, D)",
                support.ndim == 3 and len(support) == classes and support.shape[1] > 0,
            )
            _validate.shape(
                "support_probs", probs, f"{tuple(support.shape[:2])}",
                probs.shape == support.shape[:2],
            )
            _probabilities("support_probs", probs)
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
        directions = torch.randn(classes, dim, dtype=_F64, generator=_generator(generator))
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
        return torch.multinomial(self.prior, n, replacement=True, generator=_generator(generator))

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
        flat = classes.reshape(-1)                                          # N
        if self.means is not None:
            eps = torch.randn(len(flat), self.dim, dtype=_F64, generator=_generator(generator))
            x = self.means[flat] + self.noise * eps                         # N x D
        else:
            points = torch.multinomial(
                self.support_probs[flat], 1, generator=_generator(generator)
            ).squeeze(1)                                                    # N
            x = self.support[flat, points]                                  # N x D
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


def _probabilities(name: str, p: torch.Tensor) -> None:
    if not (torch.isfinite(p).all() and (p >= 0).all()):
        raise ValueError(f"{name}={p!r}: expected finite nonnegative entries")
    if not torch.allclose(p.sum(-1), torch.ones((), dtype=_F64), atol=1e-9, rtol=0.0):
        raise ValueError(f"{name}={p!r}: expected entries summing to 1 along the last axis")


def _features(f: Representation, x: torch.Tensor) -> torch.Tensor:
    """f(x) in float64.  Shape: x (..., D) -> (..., d)."""
    out = _validate.tensor("f(x)", f(x))
    _validate.shape(
        "f(x)", out, f"({', '.join(map(str, x.shape[:-1]))}, d)",
        out.ndim == x.ndim and out.shape[:-1] == x.shape[:-1],
    )
    return out.to(_F64)


def _margin_hinge(gamma: float) -> Loss:
    """l_gamma(t) = max(1 + t / gamma, 0)."""
    return lambda t: (1.0 + t / gamma).clamp(min=0.0)


def _distinct_pairs(prior: torch.Tensor) -> torch.Tensor:
    """rho(p) rho(q) 1[p != q].  Shape: (C,) -> (C, C)."""
    pair = torch.outer(prior, prior)
    return pair.fill_diagonal_(0.0)


def _mean_classifier_risk(
    feats: torch.Tensor, weights: torch.Tensor, mu: torch.Tensor, pair: torch.Tensor, ell: Loss
) -> torch.Tensor:
    """L_sup^mu = sum_{p != q} rho_p rho_q R(p, q) / sum_{p != q} rho_p rho_q with
    R(p, q) = (T(p, q) + T(q, p)) / 2 and T(p, q) = E_{X~D_p} l(f(X)^T (mu_q - mu_p)),
    class expectations taken as weighted sums over points (Saunshi et al., Sec. 2).

    Shape: feats (..., C, N, d), weights (..., C, N), mu (..., C, d), pair (C, C) -> (...).
    """
    proj = torch.einsum("...cad,...kd->...cak", feats, mu)                 # ... x C x N x C
    own = proj.diagonal(dim1=-3, dim2=-1).transpose(-1, -2)                 # ... x C x N
    task = torch.einsum("...pa,...paq->...pq", weights, ell(proj - own[..., None]))
    return (pair * (task + task.transpose(-1, -2))).sum((-2, -1)) / (2 * pair.sum())


def _collision_term(
    feats: torch.Tensor, weights: torch.Tensor, mu: torch.Tensor, nu: torch.Tensor
) -> torch.Tensor:
    """s(f) = sum_c nu_c sqrt(||Sigma_f(c)||_op) E_{X~D_c} ||f(X)||, nu_c = rho_c^2 / tau.

    Shape: feats (..., C, N, d), weights (..., C, N), mu (..., C, d), nu (C,) -> (...).
    """
    centred = feats - mu[..., None, :]                                      # ... x C x N x d
    cov = torch.einsum("...ca,...cad,...cae->...cde", weights, centred, centred)
    op_norm = torch.linalg.eigvalsh(cov)[..., -1].clamp(min=0.0)           # ... x C
    mean_norm = (weights * feats.norm(dim=-1)).sum(-1)                      # ... x C
    return (nu * op_norm.sqrt() * mean_norm).sum(-1)


@dataclass(frozen=True, eq=False)
class Population:
    """Exact population quantities of the one-negative latent-class model (Saunshi et al.).

    L_un_neq and L_sup_mu are NaN when tau = 1 (no distinct-class pair). tau = sum rho^2 >= 1/C
    is never 0 for a finite prior, so the source's tau = 0 convention (s = 0) does not arise.
    The score law lists every (c, a, b, c', e) with q = f(x_ca)^T (f(x_c'e) - f(x_cb)).

    Shape: mu (C, d); scores, score_probs, score_same_class (C * S * S * C * S,).
    """

    L_un: float
    L_un_eq: float
    L_un_neq: float
    L_sup_mu: float
    L_gamma_sup_mu: float | None
    s_f: float
    tau: float
    mu: torch.Tensor
    scores: torch.Tensor
    score_probs: torch.Tensor
    score_same_class: torch.Tensor


def population(
    model: LatentClassModel, f: Representation, loss: str, gamma: float | None = None
) -> Population:
    """Exact L_un, L_un^=, L_un^!=, L_sup^mu, L_{gamma,sup}^mu, s(f) for discrete class laws.

    Enumerates L_un = sum_{c, c', a, b, e} rho_c rho_c' p_ca p_cb p_c'e l(q_{c a b c' e}),
    q = f(x_ca)^T (f(x_c'e) - f(x_cb)); L_un^= and L_un^!= restrict to c = c' and c != c' and
    divide by tau and 1 - tau. Cost O(C^2 S^3) memory and time (THEORY.md A, S3-S5).
    """
    if model.support is None:
        raise ValueError("model is gaussian: expected a discrete model (use population_mc)")
    ell = binary(loss)
    rho, probs = model.prior, model.support_probs                          # C, C x S
    feats = _features(f, model.support)                                     # C x S x d
    mu = torch.einsum("ca,cad->cd", probs, feats)                           # C x d
    gram = torch.einsum("cad,ked->cake", feats, feats)                      # C x S x C x S
    own = gram.diagonal(dim1=0, dim2=2).permute(2, 0, 1)                    # C x S x S: [c, a, b]
    scores = gram[:, :, None] - own[..., None, None]                        # C x S x S x C x S
    weights = torch.einsum("c,ca,cb,k,ke->cabke", rho, probs, probs, rho, probs)
    classes = model.classes
    same = torch.eye(classes, dtype=torch.bool)[:, None, None, :, None].expand_as(scores)
    risk = weights * ell(scores)
    pair = _distinct_pairs(rho)                                             # C x C
    tau = rho.square().sum()
    gamma_risk = None
    if gamma is not None:
        gamma_risk = _mean_classifier_risk(
            feats, probs, mu, pair, _margin_hinge(_validate.positive("gamma", gamma))
        ).item()
    return Population(
        L_un=risk.sum().item(),
        L_un_eq=(risk[same].sum() / tau).item(),
        L_un_neq=(risk[~same].sum() / pair.sum()).item(),
        L_sup_mu=_mean_classifier_risk(feats, probs, mu, pair, ell).item(),
        L_gamma_sup_mu=gamma_risk,
        s_f=_collision_term(feats, probs, mu, rho.square() / tau).item(),
        tau=tau.item(),
        mu=mu,
        scores=scores.reshape(-1),
        score_probs=weights.reshape(-1),
        score_same_class=same.reshape(-1),
    )


@dataclass(frozen=True, eq=False)
class PopulationMC:
    """Monte Carlo estimates with 95% CI half-widths (`<name>_ci`); fields as in Population.

    Shape: mu, mu_ci (C, d).
    """

    L_un: float
    L_un_ci: float
    L_un_eq: float
    L_un_eq_ci: float
    L_un_neq: float
    L_un_neq_ci: float
    L_sup_mu: float
    L_sup_mu_ci: float
    L_gamma_sup_mu: float | None
    L_gamma_sup_mu_ci: float | None
    s_f: float
    s_f_ci: float
    tau: float
    tau_ci: float
    mu: torch.Tensor
    mu_ci: torch.Tensor


def _triplet_risk(
    model: LatentClassModel,
    f: Representation,
    ell: Loss,
    c: torch.Tensor,
    c_neg: torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    """l(f(x)^T (f(x-) - f(x+))) with x, x+ ~ D_c, x- ~ D_{c_neg}.  Shape: c, c_neg (n,) -> (n,)."""
    x = _features(f, model.sample_inputs(c, generator))                    # n x d
    x_pos = _features(f, model.sample_inputs(c, generator))
    x_neg = _features(f, model.sample_inputs(c_neg, generator))
    return ell((x * (x_neg - x_pos)).sum(-1))


def population_mc(
    model: LatentClassModel,
    f: Representation,
    loss: str,
    samples: int,
    generator: torch.Generator,
    gamma: float | None = None,
    batches: int = 50,
) -> PopulationMC:
    """Monte Carlo version of `population` for any class laws (Gaussian in particular).

    - L_un, tau: `samples` iid triplets (C, C- ~ rho); L_un^=: `samples` triplets with C = C-
      ~ nu; L_un^!=: `samples` triplets with (C, C-) ~ rho x rho given C != C-. CI: mean_ci.
    - mu, Sigma_f, s(f), L_sup^mu, L_{gamma,sup}^mu: `samples` draws per class split into
      `batches` batches; each batch gives plug-in estimates (mu_c, Sigma_f(c) with 1/N
      normalisation, op norm by eigvalsh) and the CI is taken over batch values. Plug-in
      bias is O(batches / samples) and is not in the CI.
    Requires at least two classes with rho_c > 0. Memory O(C * samples * (D + d)).
    """
    ell = binary(loss)
    gen = _generator(generator)
    _validate.at_least("batches", batches, 2)
    _validate.at_least("samples", samples, 2 * batches)
    pair = _distinct_pairs(model.prior)                                     # C x C
    if pair.sum() <= 0:
        raise ValueError(f"prior={model.prior!r}: expected at least two classes with mass > 0")
    nu = model.prior.square() / model.prior.square().sum()                  # C
    classes = model.classes
    c, c_neg = model.sample_classes(samples, gen), model.sample_classes(samples, gen)
    l_un, l_un_ci = mean_ci(_triplet_risk(model, f, ell, c, c_neg, gen))
    tau, tau_ci = mean_ci((c == c_neg).to(_F64))
    c = torch.multinomial(nu, samples, replacement=True, generator=gen)
    l_eq, l_eq_ci = mean_ci(_triplet_risk(model, f, ell, c, c, gen))
    flat = torch.multinomial(pair.reshape(-1), samples, replacement=True, generator=gen)
    l_neq, l_neq_ci = mean_ci(
        _triplet_risk(model, f, ell, flat // classes, flat % classes, gen)
    )
    per_batch = samples // batches
    labels = torch.arange(classes)[None, :, None].expand(batches, classes, per_batch)
    feats = _features(f, model.sample_inputs(labels.contiguous(), gen))     # B x C x N x d
    weights = torch.full(feats.shape[:-1], 1.0 / per_batch, dtype=_F64)     # B x C x N
    mu_b = feats.mean(-2)                                                   # B x C x d
    mu, mu_ci = mean_ci_rows(mu_b)
    s_f, s_f_ci = mean_ci(_collision_term(feats, weights, mu_b, nu))
    l_sup, l_sup_ci = mean_ci(_mean_classifier_risk(feats, weights, mu_b, pair, ell))
    l_gamma, l_gamma_ci = None, None
    if gamma is not None:
        margin = _margin_hinge(_validate.positive("gamma", gamma))
        l_gamma, l_gamma_ci = mean_ci(_mean_classifier_risk(feats, weights, mu_b, pair, margin))
    return PopulationMC(
        L_un=l_un, L_un_ci=l_un_ci, L_un_eq=l_eq, L_un_eq_ci=l_eq_ci, L_un_neq=l_neq,
        L_un_neq_ci=l_neq_ci, L_sup_mu=l_sup, L_sup_mu_ci=l_sup_ci, L_gamma_sup_mu=l_gamma,
        L_gamma_sup_mu_ci=l_gamma_ci, s_f=s_f, s_f_ci=s_f_ci, tau=tau, tau_ci=tau_ci, mu=mu,
        mu_ci=mu_ci,
    )


@dataclass(frozen=True)
class Estimate:
    """Monte Carlo estimate and its 95% CI half-width."""

    value: float
    ci: float


@dataclass(frozen=True, eq=False)
class TwoModalityGaussian:
    """X ~ N(0, I_Dx); Y | X = x ~ p+_x = N(A x, s^2 I_Dy); negatives Y' ~ p- = N(0, A A^T + s^2 I).

    p- is the marginal law of Y (Li et al., section B, with p-_x = p- for every x).

    Shape: transform A (Dy, Dx); noise s > 0 a scalar std.
    """

    transform: torch.Tensor
    noise: float

    def __post_init__(self) -> None:
        transform = _validate.tensor("transform", self.transform).to(_F64)
        _validate.shape("transform", transform, "(Dy, Dx)", transform.ndim == 2)
        object.__setattr__(self, "transform", transform)
        object.__setattr__(self, "noise", _validate.positive("noise", self.noise))

    @property
    def marginal_cov(self) -> torch.Tensor:
        """Sigma = A A^T + s^2 I, the covariance of p-.  Shape: (Dy, Dy)."""
        a = self.transform
        return a @ a.T + self.noise**2 * torch.eye(len(a), dtype=_F64)

    @property
    def mutual_information(self) -> float:
        """I(X; Y) = h(Y) - h(Y | X) = 1/2 log det(A A^T + s^2 I) - Dy log s (nats)."""
        dy = len(self.transform)
        return (0.5 * torch.logdet(self.marginal_cov) - dy * math.log(self.noise)).item()

    def sample_pairs(
        self, n: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """n iid (x, y) ~ p+.  Shape: x (n, Dx), y (n, Dy)."""
        _validate.at_least("n", n, 1)
        gen = _generator(generator)
        dy, dx = self.transform.shape
        x = torch.randn(n, dx, dtype=_F64, generator=gen)
        y = x @ self.transform.T + self.noise * torch.randn(n, dy, dtype=_F64, generator=gen)
        return x, y

    def sample_negatives(self, n: int, m: int, generator: torch.Generator) -> torch.Tensor:
        """n x m iid y' ~ p- (as A x' + s eps with fresh x').  Shape: (n, m, Dy)."""
        _validate.at_least("m", m, 1)
        return self.sample_pairs(n * m, generator)[1].reshape(n, m, -1)

    def optimal_score(self, x: torch.Tensor, y: torch.Tensor, temperature: float) -> torch.Tensor:
        """s*(x, y) = T log(p+_x(y) / p-(y)) (Li et al. Fisher consistency, g = 0):
        T [ -||y - A x||^2 / (2 s^2) - Dy log s + 1/2 y^T Sigma^{-1} y + 1/2 log det Sigma ].

        Shape: x (..., Dx), y (..., Dy) broadcastable -> (...) float64.
        """
        _validate.positive("temperature", temperature)
        x, y = x.to(_F64), y.to(_F64)
        cov = self.marginal_cov
        precision = torch.cholesky_inverse(torch.linalg.cholesky(cov))     # Dy x Dy
        resid = y - x @ self.transform.T                                    # ... x Dy
        log_pos = -0.5 * resid.square().sum(-1) / self.noise**2 - len(cov) * math.log(self.noise)
        log_neg = -0.5 * torch.einsum("...i,ij,...j->...", y, precision, y)
        log_neg = log_neg - 0.5 * torch.logdet(cov)
        return temperature * (log_pos - log_neg)

    def optimal_lse(self, temperature: float) -> float:
        """L* = min_s L(s) = L(s*) = -T I(X; Y).

        For s*, E_{y'~p-} exp((s*(x, y') - s*(x, y)) / T) = E_{p-}[p+/p-] / r(x, y) = 1 / r(x, y)
        with r = p+_x / p-, so L* = -T E_{p+} log r = -T I(X; Y) (Donsker-Varadhan: minimal).
        """
        _validate.positive("temperature", temperature)
        return -temperature * self.mutual_information

    def _scores(
        self, score_fn: ScoreFn, n: int, m: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Positive scores s(x, y) and negative scores s(x, y'_j).  Shape: (n,), (n, m)."""
        x, y = self.sample_pairs(n, generator)
        y_neg = self.sample_negatives(n, m, generator)                      # n x m x Dy
        pos = score_fn(x, y).to(_F64)                                       # n
        neg = score_fn(x[:, None, :].expand(n, m, x.shape[1]), y_neg).to(_F64)
        _validate.shape("score_fn(x, y)", pos, f"({n},)", pos.shape == (n,))
        _validate.shape("score_fn(x, y')", neg, f"({n}, {m})", neg.shape == (n, m))
        return pos, neg

    def population_lse(
        self,
        score_fn: ScoreFn,
        temperature: float,
        samples: int,
        negatives: int,
        generator: torch.Generator,
    ) -> Estimate:
        """Monte Carlo L(s) = E_{(x,y)} T log E_{y'~p-} exp((s(x, y') - s(x, y)) / T).

        Per anchor, T (logsumexp_j (Delta_j / T) - log m) over m = `negatives` fresh y'; the CI
        is over the `samples` anchors. The inner log of an average is biased low by
        about T Var(Z) / (2 m E[Z]^2), Z = exp(Delta / T): O(1 / negatives), not in the CI.
        `score_fn` maps x (..., Dx), y (..., Dy) of equal leading shape to scores (...).
        """
        _validate.positive("temperature", temperature)
        pos, neg = self._scores(score_fn, samples, negatives, generator)
        inner = torch.logsumexp((neg - pos[:, None]) / temperature, dim=1) - math.log(negatives)
        return Estimate(*mean_ci(temperature * inner))

    def population_auc(
        self, score_fn: ScoreFn, samples: int, generator: torch.Generator
    ) -> Estimate:
        """Monte Carlo E(s) = P[s(x, y) > s(x, y')] + 1/2 P[s(x, y) = s(x, y')], one y' ~ p-
        per anchor, over `samples` iid anchors.
        """
        pos, neg = self._scores(score_fn, samples, 1, generator)
        hits = (pos > neg[:, 0]).to(_F64) + 0.5 * (pos == neg[:, 0]).to(_F64)
        return Estimate(*mean_ci(hits))
