"""The certificate ladder's sections beyond the test-set certificate: `eval.ladder` for
single-modality cells (crl.steps.unimodal.ladder: PAC-Bayes-kl certificates with a data-free
and a data-dependent prior, and the uniform deviation estimate) and paired cells
(crl.steps.paired.ladder: the PAC-Bayes rungs), and `dense.eval.ladder` for dense cells
(crl.steps.dense.ladder: the PAC-Bayes rungs)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from crl.core.strict import Strict, non_empty_unique


class PacBayesConfig(Strict):
    """The PAC-Bayes rungs (crl.steps.ladder), as every family takes them.
    `noise`: the grid of Gibbs noise scales, each the expected norm of the head's noise as a
    fraction of R (sigma = noise R / sqrt(d p) per entry), fixed before any data: the
    data-free rung's bound holds for every entry at once by a union bound, so the reported one
    is the smallest; the data-dependent rungs take the one a pilot on the prior's units chose
    (crl.steps.ladder.pilot_scales). A draw is a fresh Gibbs head scored on one training unit
    (an anchor's tuple, an image with its negatives) drawn uniformly from the sample (for the
    pilot: from the prior's units): `pilot_draws` per scale choose the scale,
    `mc_draws` fresh ones at that scale bound the empirical Gibbs risk (its Monte Carlo term,
    Langford and Caruana 2002; Maurer and Pontil 2009), whatever n is. `test_heads`: fresh
    heads per held-out unit for the Gibbs head's held-out risk. `prior_fraction`: the share of
    the training units that fit the data-dependent prior's mean; its bound uses the rest;
    `prior_iterations` caps that fit (APG iterations or Adam steps; default: the model's
    `max_iter` or `steps`): a prior need not be converged, and a non-smooth loss (the hinge)
    runs to the cap. `pilot_iterations` caps the fit of the prior's pilot, which only chooses
    the data-dependent rungs' noise scale and eta, so need not converge (null: as the prior's).
    `posterior_steps` Adam steps (learning rate `posterior_lr`, `posterior_batch`
    reparameterised draws each) move the posterior's mean and scale to lower a smooth upper bound
    of the certificate itself, after the prior's scale is chosen (0: the posterior is the fitted
    head with the prior's scale)."""

    noise: list[Annotated[float, Field(gt=0, le=10)]] = Field(
        [0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0], min_length=1
    )
    pilot_draws: int = Field(4096, ge=1)
    mc_draws: int = Field(2**18, ge=2)
    test_heads: int = Field(64, ge=1)
    prior_fraction: float = Field(0.5, gt=0, lt=1)
    prior_iterations: int | None = Field(None, ge=1)
    pilot_iterations: int | None = Field(50, ge=1)
    posterior_steps: int = Field(100, ge=0)
    posterior_batch: int = Field(256, ge=1)
    posterior_lr: float = Field(0.02, gt=0)

    @field_validator("noise")
    @classmethod
    def _non_empty_unique(cls, value: list) -> list:
        return non_empty_unique(value)


class LadderConfig(PacBayesConfig):
    """`eval.ladder`, the ladder of single-modality and paired grid cells: the PAC-Bayes rungs
    (`PacBayesConfig`) and, for single-modality cells, the uniform deviation estimate:
    `ascent_starts` projected gradient ascents of Lhat_test(W) - Lhat_train(W) over the ball
    (0: no uniform deviation estimate), each at most `ascent_iterations` iterations, against
    the first `ascent_anchors` training anchors (the estimate itself uses all of them)."""

    ascent_starts: int = Field(4, ge=0)
    ascent_iterations: int = Field(100, ge=1)
    ascent_anchors: int = Field(8192, ge=1)
