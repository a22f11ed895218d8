"""Population quantities of the latent-class model: exact for finite-support class laws,
Monte Carlo with confidence intervals for any class law (Saunshi et al. 2019,
docs/theory/statements.md A).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from crl.kernels import _validate
from crl.kernels.latent.model import LatentClassModel, Representation
from crl.kernels.losses import binary, triplet_score
from crl.kernels.stats import mean_ci, mean_ci_rows

Loss = Callable[[torch.Tensor], torch.Tensor]
_F64 = torch.float64


def _features(f: Representation, x: torch.Tensor) -> torch.Tensor:
    """f(x) in float64.  Shape: x (..., D) -> (..., d)."""
    out = _validate.tensor("f(x)", f(x))
    _validate.shape(
        "f(x)",
        out,
        f"({', '.join(map(str, x.shape[:-1]))}, d)",
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
    proj = torch.einsum("...cad,...kd->...cak", feats, mu)  # ... x C x N x C
    own = proj.diagonal(dim1=-3, dim2=-1).transpose(-1, -2)  # ... x C x N
    task = torch.einsum("...pa,...paq->...pq", weights, ell(proj - own[..., None]))
    return (pair * (task + task.transpose(-1, -2))).sum((-2, -1)) / (2 * pair.sum())


def _collision_term(
    feats: torch.Tensor, weights: torch.Tensor, mu: torch.Tensor, nu: torch.Tensor
) -> torch.Tensor:
    """s(f) = sum_c nu_c sqrt(||Sigma_f(c)||_op) E_{X~D_c} ||f(X)||, nu_c = rho_c^2 / tau.

    Shape: feats (..., C, N, d), weights (..., C, N), mu (..., C, d), nu (C,) -> (...).
    """
    centred = feats - mu[..., None, :]  # ... x C x N x d
    cov = torch.einsum("...ca,...cad,...cae->...cde", weights, centred, centred)
    op_norm = torch.linalg.eigvalsh(cov)[..., -1].clamp(min=0.0)  # ... x C
    mean_norm = (weights * feats.norm(dim=-1)).sum(-1)  # ... x C
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
    divide by tau and 1 - tau. Cost O(C^2 S^3) memory and time (docs/theory/statements.md A,
    S3-S5).
    """
    if model.support is None:
        raise ValueError("model is gaussian: expected a discrete model (use population_mc)")
    ell = binary(loss)
    rho, probs = model.prior, model.support_probs  # C, C x S
    feats = _features(f, model.support)  # C x S x d
    mu = torch.einsum("ca,cad->cd", probs, feats)  # C x d
    gram = torch.einsum("cad,ked->cake", feats, feats)  # C x S x C x S
    own = gram.diagonal(dim1=0, dim2=2).permute(2, 0, 1)  # C x S x S: [c, a, b]
    scores = gram[:, :, None] - own[..., None, None]  # C x S x S x C x S
    weights = torch.einsum("c,ca,cb,k,ke->cabke", rho, probs, probs, rho, probs)
    classes = model.classes
    same = torch.eye(classes, dtype=torch.bool)[:, None, None, :, None].expand_as(scores)
    risk = weights * ell(scores)
    pair = _distinct_pairs(rho)  # C x C
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
    x = _features(f, model.sample_inputs(c, generator))  # n x d
    x_pos = _features(f, model.sample_inputs(c, generator))
    x_neg = _features(f, model.sample_inputs(c_neg, generator))
    return ell(triplet_score(x, x_pos, x_neg))


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
    gen = _validate.generator(generator)
    _validate.at_least("batches", batches, 2)
    _validate.at_least("samples", samples, 2 * batches)
    pair = _distinct_pairs(model.prior)  # C x C
    if pair.sum() <= 0:
        raise ValueError(f"prior={model.prior!r}: expected at least two classes with mass > 0")
    nu = model.prior.square() / model.prior.square().sum()  # C
    classes = model.classes
    c, c_neg = model.sample_classes(samples, gen), model.sample_classes(samples, gen)
    l_un, l_un_ci = mean_ci(_triplet_risk(model, f, ell, c, c_neg, gen))
    tau, tau_ci = mean_ci((c == c_neg).to(_F64))
    c = torch.multinomial(nu, samples, replacement=True, generator=gen)
    l_eq, l_eq_ci = mean_ci(_triplet_risk(model, f, ell, c, c, gen))
    flat = torch.multinomial(pair.reshape(-1), samples, replacement=True, generator=gen)
    l_neq, l_neq_ci = mean_ci(_triplet_risk(model, f, ell, flat // classes, flat % classes, gen))
    per_batch = samples // batches
    labels = torch.arange(classes)[None, :, None].expand(batches, classes, per_batch)
    feats = _features(f, model.sample_inputs(labels.contiguous(), gen))  # B x C x N x d
    weights = torch.full(feats.shape[:-1], 1.0 / per_batch, dtype=_F64)  # B x C x N
    mu_b = feats.mean(-2)  # B x C x d
    mu, mu_ci = mean_ci_rows(mu_b)
    s_f, s_f_ci = mean_ci(_collision_term(feats, weights, mu_b, nu))
    l_sup, l_sup_ci = mean_ci(_mean_classifier_risk(feats, weights, mu_b, pair, ell))
    l_gamma, l_gamma_ci = None, None
    if gamma is not None:
        margin = _margin_hinge(_validate.positive("gamma", gamma))
        l_gamma, l_gamma_ci = mean_ci(_mean_classifier_risk(feats, weights, mu_b, pair, margin))
    return PopulationMC(
        L_un=l_un,
        L_un_ci=l_un_ci,
        L_un_eq=l_eq,
        L_un_eq_ci=l_eq_ci,
        L_un_neq=l_neq,
        L_un_neq_ci=l_neq_ci,
        L_sup_mu=l_sup,
        L_sup_mu_ci=l_sup_ci,
        L_gamma_sup_mu=l_gamma,
        L_gamma_sup_mu_ci=l_gamma_ci,
        s_f=s_f,
        s_f_ci=s_f_ci,
        tau=tau,
        tau_ci=tau_ci,
        mu=mu,
        mu_ci=mu_ci,
    )
