"""The certificate ladder of paired cells (crl.steps.paired.ladder): the units' losses against
Li et al.'s empirical risk, the test-set certificate's coverage on the clipped law, the PAC-Bayes
rungs with eval.ladder, and a ladder that moves no other column."""

from __future__ import annotations

import math

import pytest
import torch

from crl.core.config import validate
from crl.kernels import certified_paired, pac_bayes, score_model
from crl.kernels.latent.canonical import CanonicalGaussian
from crl.kernels.score_model import PairedSample, QuadraticScore
from crl.kernels.seeding import generator
from crl.kernels.solver import SolverSpec
from crl.steps import ladder as rungs
from crl.steps.keys import draws_id, grid_keys
from crl.steps.paired import ladder as paired_ladder
from crl.steps.paired import model_cell, split_cell
from crl.steps.paired.clipped_cell import held_out_units, run_clipped_cell
from tests.steps.paired.test_clipped_cell import TREE

LADDER = {
    "mc_draws": 4096,
    "pilot_draws": 256,
    "test_heads": 4,
    "posterior_steps": 20,
    "posterior_batch": 64,
}


def _tree(ladder: dict | None) -> dict:
    ev = {**TREE["eval"], "ladder": ladder} if ladder is not None else TREE["eval"]
    grid = {**TREE["grid"], "n": [256]}
    return {**TREE, "grid": grid, "eval": ev}


def _rows(tree: dict) -> list[dict]:
    cfg = validate(tree)
    source = model_cell.source(cfg)
    return [
        run_clipped_cell(cfg, k, k.cell_id(cfg.hash()), draws_id(cfg, k), source)
        for k in grid_keys(cfg)
    ]


@pytest.fixture(scope="module")
def with_ladder() -> list[dict]:
    return _rows(_tree(LADDER))


def _sample(n: int, m: int, p: int, gen: torch.Generator) -> PairedSample:
    def ball(*shape: int) -> torch.Tensor:
        v = torch.randn(*shape, p, generator=gen, dtype=torch.float64)
        return v / v.norm(dim=-1, keepdim=True).clamp(min=1.0)

    return PairedSample(ball(n), ball(n), ball(n, m))


def test_unit_terms_are_each_pairs_lse_loss_with_its_own_negatives() -> None:
    """Head k on pair rows[k] equals Li et al.'s per-anchor risk of that head (float64), for
    heads whose B is not symmetric too; every such loss lies in the class's range."""
    gen = torch.Generator().manual_seed(0)
    sample = _sample(30, 5, 3, gen)
    T, R = 0.5, 2.0
    terms = paired_ladder.unit_terms(sample, T)
    heads = pac_bayes.gibbs_heads(torch.zeros(1, 18, dtype=torch.float64), 1.0, R, 40, gen)
    rows = torch.randint(0, 30, (40,), generator=gen)
    got = terms(heads, rows)
    for k in range(40):
        M, B = heads[k, 0, :9].reshape(3, 3), heads[k, 0, 9:].reshape(3, 3)
        one = PairedSample(
            sample.x[rows[k], None], sample.y[rows[k], None], sample.negatives[rows[k], None]
        )
        want = score_model.empirical_risk(M, B, one, T)
        assert float(got[k]) == pytest.approx(float(want), rel=1e-12, abs=1e-12)
    S = certified_paired.score_bound(R)
    assert float(got.abs().max()) <= 2 * S + 1e-12  # the range [-2S, 2S]
    # the flattened score round-trips
    score = QuadraticScore(heads[0, 0, :9].reshape(3, 3), heads[0, 0, 9:].reshape(3, 3))
    assert torch.equal(paired_ladder.flat(score), heads[0])


def test_the_test_set_certificate_covers_the_clipped_laws_loss() -> None:
    """A fixed score on the clipped Gaussian: L_m(s) from 400000 fresh pairs (standard error
    below 1e-3 of the range) against 300 certificates from 100 held-out pairs each: misses at
    most delta (with binomial slack), while the plain held-out mean misses about half the time,
    so the test can fail."""
    model = CanonicalGaussian.make([0.9, 0.5], True, generator(1, "model"))
    r, m, T, R, delta = 3.0, 4, 1.0, 2.0, 0.1
    M, B = model.bayes_parameters(T)
    scale_to = R / math.sqrt(float((M**2).sum() + (B**2).sum()))
    score = QuadraticScore(M * scale_to, B * scale_to)
    constants = certified_paired.paired_constants("lse", m, R, T)
    scale = rungs.Scale.of(constants.psi_lo, constants.B)
    big = held_out_units(model, 400_000, m, r, generator(1, "truth"))
    terms = paired_ladder.held_out_terms(score, big, T)
    truth, se = float(terms.mean()), float(terms.std() / math.sqrt(len(terms)))
    assert se < 1e-3 * constants.B
    gen = generator(1, "sets")
    misses = plain = 0
    for _ in range(300):
        held = paired_ladder.held_out_terms(score, held_out_units(model, 100, m, r, gen), T)
        cert = rungs.test_set_columns(held, scale, delta)["cert_test_set"]
        misses += cert < truth - 3 * se
        plain += float(held.mean()) < truth
    assert misses <= 300 * delta + 3 * math.sqrt(300 * delta * (1 - delta))
    assert plain > 90


def test_the_pac_bayes_rungs_of_a_clipped_scrl_cell(with_ladder: list[dict]) -> None:
    scrl = next(r for r in with_ladder if r["regime"] == "scrl")
    sscrl = next(r for r in with_ladder if r["regime"] == "sscrl")
    for prefix in ("cert_pb_free", "cert_pb_data"):
        assert scrl[f"{prefix}_reason"] is None
        assert scrl["loss_min"] < scrl[prefix] < scrl["loss_min"] + scrl["loss_range"]
        assert scrl[f"{prefix}_mc"] >= scrl[f"{prefix}_gibbs_train"]
        assert scrl[prefix] >= scrl[f"{prefix}_mc"]
        assert sscrl[prefix] is None and sscrl[f"{prefix}_reason"] == rungs.SHARED
    assert scrl["cert_pb_free_n"] == 256 and scrl["cert_pb_data_n"] == 128
    # the data-dependent prior sits near the head: a smaller KL than the data-free one's
    assert scrl["cert_pb_data_kl"] < scrl["cert_pb_free_kl"]
    # each certificate above its Gibbs head's held-out loss (both at level delta)
    assert scrl["cert_pb_data"] > scrl["gibbs_test_loss"] - scrl["gibbs_test_loss_ci"]
    assert scrl["cert_pb_free"] > scrl["cert_pb_free_gibbs_test"]
    assert scrl["learning_certified_pb_data"] == (scrl["cert_pb_data"] < 0.0)
    # the excess rung: h_ref's test-set certificate plus the excess bound (at n = 128 looser
    # than the kl rung: its terms are 1/n, with the eta grid's and the three-way delta's cost)
    assert scrl["cert_pb_ref_reason"] is None and scrl["cert_pb_ref_eta"] > 0
    assert scrl["cert_pb_ref"] == pytest.approx(
        scrl["cert_pb_ref_reference"] + scrl["cert_pb_ref_gap"], rel=1e-12
    )
    assert scrl["cert_pb_ref"] > scrl["gibbs_test_loss"] - scrl["gibbs_test_loss_ci"]
    assert scrl["cert_pb_ref"] <= scrl["loss_min"] + scrl["loss_range"]
    assert scrl["learning_certified_pb_ref"] == (scrl["cert_pb_ref"] < 0.0)
    assert scrl["ladder_seconds"] > 0


def test_the_ladder_moves_no_other_column(with_ladder: list[dict]) -> None:
    """The ladder draws from generators of its own (its test-set rung runs without it too)."""
    plain = _rows(_tree(None))
    ladder_only = set(rungs.PB_COLUMNS) | {
        "ladder_seconds",
        "wall_seconds",
        "cell_id",
        "learning_certified_pb_free",
        "learning_certified_pb_data",
        "learning_certified_pb_ref",
    }
    for a, b in zip(plain, with_ladder, strict=True):
        for name in set(a) - ladder_only:
            if not name.endswith("_seconds"):
                assert a[name] == b[name], name


def test_draws_of_a_nearly_deterministic_gibbs_head_average_to_the_empirical_risk() -> None:
    gen = torch.Generator().manual_seed(3)
    sample = _sample(50, 3, 2, gen)
    score, _ = score_model.fit(sample, 1.5, 1.0, SolverSpec(1e-8, 500))
    terms = paired_ladder.unit_terms(sample, 1.0)
    head = paired_ladder.flat(score)
    draws, _ = pac_bayes.unit_draws(head, 1e-12, 1.5, 50, 20000, terms, 512, gen)
    per_pair = score_model.empirical_risk(score.M, score.B, sample, 1.0, reduction="none")
    mean, se = float(per_pair.mean()), float(per_pair.std() / math.sqrt(20000))
    assert float(draws.mean()) == pytest.approx(mean, abs=4 * se)


def test_split_held_out_units_are_disjoint_rows_of_the_test_split() -> None:
    gen = torch.Generator().manual_seed(0)
    rows = 23
    x = torch.arange(rows, dtype=torch.float64)[:, None].expand(rows, 2).clone()
    splits = split_cell.PairedSplits(x, x, x, x + 0.5, torch.arange(3), torch.arange(3))
    units = split_cell.held_out_units(splits, 100, 4, gen)
    assert units.x.shape == (4, 2) and units.negatives.shape == (4, 4, 2)  # 23 // 5 anchors
    used = torch.cat([units.x[:, 0], units.negatives[..., 0].reshape(-1) - 0.5])
    assert len(set(used.tolist())) == 20  # no row twice
    assert split_cell.held_out_units(splits, 100, 23, gen) is None


def test_eval_ladder_is_accepted_on_a_paired_grid() -> None:
    assert validate(_tree(LADDER)).eval.ladder.mc_draws == 4096
