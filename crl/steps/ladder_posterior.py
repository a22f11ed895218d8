"""The PAC-Bayes rungs' posterior tuned on the bound itself (`optimise_posterior`,
PAC-Bayes-by-backprop; crl.steps.ladder's `certificate` calls it with `posterior_steps`)."""

from __future__ import annotations

import math

import torch

from crl.steps.ladder_parts import Setting, Units


def optimise_posterior(
    mean: torch.Tensor,
    prior: torch.Tensor,
    sigma: float,
    units: Units,
    n: int,
    level: float,
    setting: Setting,
    gen: torch.Generator,
) -> tuple[torch.Tensor, float]:
    """The posterior N(mu, s^2 I) after `posterior_steps` Adam steps from (mean, sigma) on
    (sqrt(q + c/2) + sqrt(c/2))^2, an upper bound of kl^-1(q, c) (the "quad" bound of Perez-Ortiz
    et al. 2021), with q the [0, 1] losses of `posterior_batch` heads P_R(mu + s E) each on a
    uniformly drawn unit (reparameterised) and c = (KL(Q || P) + ln(2 sqrt(n) / level)) / n, P
    = N(prior, sigma^2 I). The certificate holds for every posterior at once, so choosing one on
    the bound's own units keeps it valid; its Monte Carlo draws come after. Returns (mu, s)."""
    ladder, scale, radius = setting.ladder, setting.scale, setting.radius
    k = mean.numel()
    mu = mean.detach().double().clone().requires_grad_(True)
    log_s = torch.tensor(math.log(sigma), dtype=torch.float64, requires_grad=True)
    target = prior.detach().double()
    log_term = math.log(2.0 * math.sqrt(n) / level)
    optimiser = torch.optim.Adam([mu, log_s], lr=ladder.posterior_lr)
    batch = ladder.posterior_batch
    for _ in range(ladder.posterior_steps):
        noise = torch.randn((batch, *mean.shape), generator=gen, dtype=torch.float64)
        heads = mu.unsqueeze(0) + torch.exp(log_s) * noise
        norms = torch.linalg.vector_norm(heads.flatten(1), dim=1)
        heads = heads * torch.clamp(radius / norms, max=1.0)[:, None, None]  # P_R
        rows = torch.randint(0, units.count, (batch,), generator=gen)
        q = ((units.terms(heads, rows) - scale.low) / scale.width).clamp(0.0, 1.0).mean()
        ratio = torch.exp(2.0 * log_s) / sigma**2
        distance = ((mu - target) ** 2).sum() / sigma**2
        kl = 0.5 * (k * ratio + distance - k - k * torch.log(ratio))
        c = (kl + log_term) / n
        objective = (torch.sqrt(q + c / 2) + torch.sqrt(c / 2)) ** 2
        optimiser.zero_grad(set_to_none=True)
        objective.backward()
        optimiser.step()
    return mu.detach(), float(torch.exp(log_s.detach()))
