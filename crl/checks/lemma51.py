"""S6: Lemma 5.1 of Saunshi et al. (hinge) on bounded sub-Gaussian class laws
(docs/theory/statements.md S6)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from crl.checks._instances import (
    _F64,
    Row,
    _dirichlet,
    _instance_generator,
    _log_uniform,
    _randint,
    _row,
)
from crl.checks._registry import statement
from crl.kernels import bounds, latent

if TYPE_CHECKING:
    from crl.checks import Constants

_S6_RADII = (0.3, 0.6, 0.9, 1.5, 3.0)
_S6_EPS = (1.0, 0.1, 0.01)


@statement("S6_lemma51", instances=200)
def _s6_lemma51(seed: int, instance: int, constants: Constants) -> list[Row]:
    """Lemma 5.1 (hinge): L_un^!=(f) <= gamma L_{gamma,sup}^mu(f) + eps, exactly.

    Construction (bounded, so sup ||f|| <= R holds honestly): class c has law
    X = m_c + a_c * xi with xi uniform on {-1, +1}^D (independent Rademacher coordinates,
    half-widths a_c > 0): a discrete law on 2^D points, D in [1, 3]. f(x) = W x, W (d, D).
    For a unit u, u^T (f(X) - mu_c) = sum_j xi_j a_cj (W^T u)_j is sub-Gaussian with proxy
    sum_j a_cj^2 (W^T u)_j^2 (a Rademacher sign is 1-sub-Gaussian: cosh(l) <= exp(l^2 / 2),
    Hoeffding's (b - a)^2 / 4 on [-1, 1]), so sigma = max_c ||W diag(a_c)||_op. W is scaled so
    that R = max over the support of ||f(x)|| equals a target from (0.3, 0.6, 0.9, 1.5, 3)
    (by instance, times a jitter in [0.8, 1.25]), on both sides of R = 1. One row per eps in
    (1, 0.1, 0.01); gamma from `bounds.lemma51_gamma`.
    """
    statement = "S6_lemma51"
    gen, instance_seed = _instance_generator(seed, statement, instance)
    classes, dim, d = _randint(gen, 2, 4), _randint(gen, 1, 3), _randint(gen, 1, 3)
    sep = _log_uniform(gen, 0.3, 3.0)
    centres = sep * torch.randn(classes, dim, dtype=_F64, generator=gen)  # (C, D)
    half = 0.2 + 1.3 * torch.rand(classes, dim, dtype=_F64, generator=gen)  # (C, D)
    codes = torch.arange(1 << dim)[:, None] >> torch.arange(dim)  # (2^D, D) bits
    xi = (1 - 2 * (codes & 1)).to(_F64)  # (2^D, D) signs
    support = centres[:, None, :] + half[:, None, :] * xi  # (C, 2^D, D)
    probs = torch.full((classes, 1 << dim), 1.0 / (1 << dim), dtype=_F64)
    model = latent.LatentClassModel.discrete(_dirichlet(gen, classes), support, probs)
    W = torch.randn(d, dim, dtype=_F64, generator=gen)  # (d, D)
    target = _S6_RADII[instance % len(_S6_RADII)] * _log_uniform(gen, 0.8, 1.25)
    W = W * (target / (support @ W.T).norm(dim=-1).max().item())
    R = (support @ W.T).norm(dim=-1).max().item()
    sigma = torch.linalg.matrix_norm(W[None] * half[:, None, :], ord=2).max().item()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x @ W.T

    params = {
        "classes": classes,
        "D": dim,
        "d": d,
        "R": R,
        "sigma": sigma,
        "separation": sep,
        "loss": "hinge",
        "instance_seed": instance_seed,
    }
    rows = []
    for eps in _S6_EPS:
        gamma = bounds.lemma51_gamma(R, sigma, eps)
        pop = latent.population(model, f, "hinge", gamma=gamma)
        rows.append(
            _row(
                statement,
                instance,
                "exact",
                f"eps={eps:g}",
                params | {"eps": eps, "gamma": gamma},
                pop.L_un_neq,
                gamma * pop.L_gamma_sup_mu + eps,
                note=f"L_gamma_sup_mu={pop.L_gamma_sup_mu!r}",
            )
        )
    return rows
