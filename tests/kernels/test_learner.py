"""crl.kernels.learner: sampling a cell's tuples and fitting f = W phi in a Frobenius ball."""

from __future__ import annotations

import pytest
import torch

from crl.kernels import losses
from crl.kernels.learner import (
    FitSpec,
    Sample,
    Views,
    draw,
    fit,
    fit_to_tolerance,
    mean_loss,
    objective,
    per_anchor_loss,
    project,
    same_class_partner,
    scores,
)
from crl.kernels.learner import _values as mean_loss_values
from crl.kernels.phased import gram_preconditioner
from crl.kernels.solver import SolverSpec

LOSSES = ("hinge", "logistic", "lse", "info_nce")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _views(rows: int = 40, p: int = 5, classes: int = 4, seed: int = 0, dtype=torch.float32):
    gen = _gen(seed)
    x = torch.randn(rows, p, generator=gen, dtype=dtype)
    x = x / x.norm(dim=1, keepdim=True).max()
    labels = torch.randint(0, classes, (rows,), generator=gen)
    return Views(x, x, x, labels, augmented=False)


def _easy_views(rows: int = 60) -> Views:
    """Six tight classes at 0.8 (+-e1, +-e2, +-e3) plus small noise, norms <= 1."""
    labels = torch.arange(rows) % 6
    centres = 0.8 * torch.cat([torch.eye(3), -torch.eye(3)])
    x = centres[labels] + 0.05 * torch.randn(rows, 3, generator=_gen(7))
    x = x / x.norm(dim=1, keepdim=True).clamp(min=1.0)
    return Views(x, x, x, labels, augmented=False)


# --- same_class_partner -------------------------------------------------------------------------


def test_same_class_partner_is_another_member_of_the_class() -> None:
    labels = torch.tensor([3, 1, 3, 3, 7, 1, 0, 3])  # class 7 and class 0 are singletons
    anchors = torch.arange(len(labels))
    for seed in range(30):
        partner = same_class_partner(labels, anchors, _gen(seed))
        assert partner.shape == anchors.shape
        assert torch.equal(labels[partner], labels[anchors])
        singleton = torch.isin(labels[anchors], torch.tensor([0, 7]))
        assert torch.equal(partner[singleton], anchors[singleton])  # alone: itself
        assert not torch.any(partner[~singleton] == anchors[~singleton])


def test_same_class_partner_is_uniform_over_the_others() -> None:
    labels = torch.tensor([0, 1, 0, 0, 0])  # anchor 0 has partners 2, 3, 4
    anchors = torch.zeros(3000, dtype=torch.long)
    partner = same_class_partner(labels, anchors, _gen(1))
    counts = torch.bincount(partner, minlength=5)
    assert counts[0] == 0 and counts[1] == 0
    assert torch.all((counts[2:] - 1000).abs() < 120)  # ~ 4.5 sigma of Binomial(3000, 1/3)


def test_same_class_partner_is_reproducible() -> None:
    labels = torch.randint(0, 5, (50,), generator=_gen(2))
    anchors = torch.randperm(50, generator=_gen(3))[:20]
    first = same_class_partner(labels, anchors, _gen(4))
    assert torch.equal(first, same_class_partner(labels, anchors, _gen(4)))


# --- draw ---------------------------------------------------------------------------------------


def test_draw_own_negatives() -> None:
    views = _views()
    sample = draw(views, n=15, m=3, shared=False, gen=_gen())
    assert sample.anchors.shape == (15,) and sample.positives.shape == (15,)
    assert sample.negatives.shape == (15, 3) and not sample.shared
    assert len(set(sample.anchors.tolist())) == 15  # without replacement
    assert torch.equal(views.labels[sample.positives], views.labels[sample.anchors])
    assert sample.negatives.min() >= 0 and sample.negatives.max() < 40


def test_draw_shared_negatives() -> None:
    sample = draw(_views(), n=10, m=6, shared=True, gen=_gen())
    assert sample.negatives.shape == (6,) and sample.shared


def test_draw_every_anchor_once_when_n_is_the_split() -> None:
    sample = draw(_views(rows=12), n=12, m=2, shared=False, gen=_gen(5))
    assert sorted(sample.anchors.tolist()) == list(range(12))


def test_draw_augmented_positive_is_the_other_view_of_the_anchor() -> None:
    base = _views()
    views = Views(base.anchor, base.anchor * 0.5, base.anchor * 0.5, base.labels, augmented=True)
    sample = draw(views, n=8, m=2, shared=False, gen=_gen())
    assert torch.equal(sample.positives, sample.anchors)


def test_draw_is_reproducible() -> None:
    views = _views()
    a, b = draw(views, 10, 4, False, _gen(9)), draw(views, 10, 4, False, _gen(9))
    for x, y in zip(
        (a.anchors, a.positives, a.negatives), (b.anchors, b.positives, b.negatives), strict=True
    ):
        assert torch.equal(x, y)


# --- project ------------------------------------------------------------------------------------


def test_project_onto_the_frobenius_ball() -> None:
    weight = torch.tensor([[3.0, 0.0], [0.0, 4.0]])  # ||W||_F = 5
    projected = project(weight, 2.0)
    assert torch.allclose(projected, weight * 0.4)
    assert torch.linalg.matrix_norm(projected).item() == pytest.approx(2.0)
    inside = torch.tensor([[0.3, 0.4]])
    assert torch.equal(project(inside, 1.0), inside)  # already inside: unchanged
    zero = torch.zeros(2, 3)
    assert torch.equal(project(zero, 1.0), zero)


# --- fit ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("loss", "shared"), [("hinge", False), ("lse", True), ("info_nce", False)])
def test_fit_stays_in_the_ball_and_is_deterministic(loss: str, shared: bool) -> None:
    views = _views()
    sample = draw(views, 20, 3, shared, _gen(1))
    spec = FitSpec(d=3, radius=0.7, steps=15, batch=8, lr=0.5)  # a large lr pushes to the edge
    first = fit([(views, sample)], spec, loss, 0.5, _gen(2))
    second = fit([(views, sample)], spec, loss, 0.5, _gen(2))
    assert first.shape == (3, 5) and not first.requires_grad
    assert torch.equal(first, second)
    assert torch.linalg.matrix_norm(first).item() <= 0.7 * (1 + 1e-6)
    assert not torch.equal(first, fit([(views, sample)], spec, loss, 0.5, _gen(3)))


def test_fit_with_no_steps_returns_the_projected_start() -> None:
    views = _views()
    sample = draw(views, 10, 2, False, _gen())
    weight = fit([(views, sample)], FitSpec(2, 1e-3, 0, 4, 0.1), "hinge", 0.5, _gen(4))
    init = 0.1 * torch.randn(2, 5, generator=_gen(4))
    assert torch.allclose(weight, project(init, 1e-3))


@pytest.mark.parametrize("loss", LOSSES)
def test_fit_lowers_the_training_loss_on_an_easy_task(loss: str) -> None:
    views = _easy_views()
    sample = draw(views, 30, 1, False, _gen(0))
    start = fit([(views, sample)], FitSpec(2, 2.0, 0, 16, 0.1), loss, 0.5, _gen(1))
    trained = fit([(views, sample)], FitSpec(2, 2.0, 60, 16, 0.1), loss, 0.5, _gen(1))
    before = per_anchor_loss(start, views, sample, loss, 0.5).mean().item()
    after = per_anchor_loss(trained, views, sample, loss, 0.5).mean().item()
    assert after < before - 0.2, (before, after)
    assert torch.linalg.matrix_norm(trained).item() <= 2.0 * (1 + 1e-6)


@pytest.mark.parametrize(("loss", "shared"), [("logistic", False), ("lse", True), ("lse", False)])
def test_fit_to_tolerance_reaches_a_stationary_point_below_adam(loss: str, shared: bool) -> None:
    """The apg solver stops on its gradient-mapping tolerance, stays in the ball, and its mean
    training loss is no higher than a fixed budget of Adam steps from the same start."""
    views = _easy_views()
    sample = draw(views, 30, 4, shared, _gen(0))
    spec = FitSpec(2, 2.0, 60, 30, 0.1)
    weight, solution = fit_to_tolerance(
        [(views, sample)], spec, loss, 0.5, _gen(1), SolverSpec(1e-6, 4000)
    )
    assert solution.converged and solution.criterion < 1e-6
    assert torch.linalg.matrix_norm(weight).item() <= 2.0 * (1 + 1e-9)
    adam = fit([(views, sample)], spec, loss, 0.5, _gen(1))
    tolerance = per_anchor_loss(weight, views, sample, loss, 0.5).mean().item()
    budget = per_anchor_loss(adam, views, sample, loss, 0.5).mean().item()
    assert tolerance <= budget + 1e-6, (tolerance, budget)
    assert solution.value == pytest.approx(tolerance, rel=1e-5)


class _Recorded(list):
    """Blocks that record which block each access asked for."""

    def __init__(self, blocks: list) -> None:
        super().__init__(blocks)
        self.asked: list[int] = []

    def __getitem__(self, b: int):  # noqa: ANN204
        self.asked.append(b)
        return super().__getitem__(b)


def _slices(sample: Sample, sizes: list[int]) -> list[Sample]:
    out, start = [], 0
    for size in sizes:
        rows = slice(start, start + size)
        negatives = sample.negatives if sample.shared else sample.negatives[rows]
        out.append(Sample(sample.anchors[rows], sample.positives[rows], negatives))
        start += size
    return out


def test_fit_spends_ceil_rows_over_batch_steps_on_each_block_in_turn() -> None:
    views = _views()
    sample = draw(views, 14, 2, False, _gen(1))
    blocks = _Recorded([(views, part) for part in _slices(sample, [8, 6])])
    spec = FitSpec(d=2, radius=1.0, steps=9, batch=4, lr=0.1)
    weight = fit(blocks, spec, "logistic", 0.5, _gen(2))
    asked = blocks.asked
    # block 0 (8 rows): 2 steps, block 1 (6 rows): 2 steps, then around again (the first access
    # reads p from block 0)
    assert asked == [0, 0, 0, 1, 1, 0, 0, 1, 1, 0]
    assert torch.equal(weight, fit(list(blocks), spec, "logistic", 0.5, _gen(2)))
    assert torch.linalg.matrix_norm(weight).item() <= 1.0 * (1 + 1e-6)


@pytest.mark.parametrize(
    ("loss", "shared"), [("logistic", False), ("lse", True), ("info_nce", False)]
)
def test_fit_to_tolerance_on_blocks_solves_the_whole_sample(loss: str, shared: bool) -> None:
    """A sample in three blocks has the same objective as the whole sample (up to summation
    order), so APG from the same start reaches the same point."""
    views = _easy_views()
    sample = draw(views, 30, 4, shared, _gen(0))
    spec, solver = FitSpec(2, 2.0, 0, 30, 0.1), SolverSpec(1e-8, 4000)
    whole, at_whole = fit_to_tolerance([(views, sample)], spec, loss, 0.5, _gen(1), solver)
    blocks = [(views, part) for part in _slices(sample, [11, 11, 8])]
    streamed, at_blocks = fit_to_tolerance(blocks, spec, loss, 0.5, _gen(1), solver)
    assert at_blocks.converged and at_whole.converged
    assert at_blocks.value == pytest.approx(at_whole.value, rel=1e-10)
    torch.testing.assert_close(streamed, whole, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    ("loss", "shared"), [("logistic", False), ("lse", True), ("info_nce", False)]
)
def test_streamed_fit_in_phases_reaches_the_held_fit(loss: str, shared: bool) -> None:
    """A streamed sample (hold 0) is fitted in three phases (APG to COARSE_TOL, the
    preconditioned descent over the ball, APG to the tolerance): it ends at the held sample's
    fit, on the sphere, within the same tolerance. The loss depends on W through W^T W only,
    so that is what is compared."""
    views = _easy_views()
    sample = draw(views, 30, 4, shared, _gen(0))
    blocks = [(views, part) for part in _slices(sample, [11, 11, 8])]
    spec, solver = FitSpec(2, 1.0, 0, 30, 0.1), SolverSpec(1e-8, 4000)
    held, at_held = fit_to_tolerance(blocks, spec, loss, 0.5, _gen(1), solver)
    streamed, at_streamed = fit_to_tolerance(blocks, spec, loss, 0.5, _gen(1), solver, hold=0)
    assert at_held.converged and at_streamed.converged and at_streamed.criterion < 1e-8
    assert float(streamed.norm()) == pytest.approx(1.0, rel=1e-6)
    assert at_streamed.value == pytest.approx(at_held.value, rel=1e-9)
    torch.testing.assert_close(streamed.T @ streamed, held.T @ held, atol=1e-5, rtol=0)


@pytest.mark.parametrize("loss", ["logistic", "info_nce"])
def test_streamed_fit_in_phases_reaches_an_interior_minimiser(loss: str) -> None:
    """Noisy classes and a radius of 3: the minimiser lies inside the ball (norm 2.99 and
    2.11), and the phased streamed fit reaches the held fit there too."""
    labels = torch.arange(60) % 6
    centres = 0.8 * torch.cat([torch.eye(3), -torch.eye(3)])
    x = centres[labels] + 0.5 * torch.randn(60, 3, generator=_gen(7))
    x = x / x.norm(dim=1, keepdim=True).clamp(min=1.0)
    views = Views(x, x, x, labels, augmented=False)
    sample = draw(views, 30, 4, False, _gen(0))
    blocks = [(views, part) for part in _slices(sample, [11, 11, 8])]
    spec, solver = FitSpec(2, 3.0, 0, 30, 0.1), SolverSpec(1e-8, 4000)
    held, at_held = fit_to_tolerance(blocks, spec, loss, 0.5, _gen(1), solver)
    streamed, at_streamed = fit_to_tolerance(blocks, spec, loss, 0.5, _gen(1), solver, hold=0)
    assert at_held.converged and at_streamed.converged
    assert float(held.norm()) < 3.0 * (1 - 1e-3)
    assert at_streamed.value == pytest.approx(at_held.value, rel=1e-9)
    torch.testing.assert_close(streamed.T @ streamed, held.T @ held, atol=1e-5, rtol=0)


def test_gram_preconditioner_solves_the_shifted_gram_system() -> None:
    """(W W^T + lambda I)^-1 V with lambda a hundredth of W W^T's largest eigenvalue, positive
    definite even where W is rank-deficient."""
    weight = torch.tensor([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0]], dtype=torch.float64)  # rank 1
    vector = torch.randn(6, generator=_gen(2), dtype=torch.float64)
    out = gram_preconditioner(2)(weight.reshape(-1), vector)
    gram = weight @ weight.T
    shifted = gram + 1e-2 * float(torch.linalg.eigvalsh(gram)[-1]) * torch.eye(2, dtype=gram.dtype)
    torch.testing.assert_close(shifted @ out.reshape(2, 3), vector.reshape(2, 3))
    assert float(out @ vector) > 0


@pytest.mark.parametrize(
    ("loss", "shared"), [("logistic", False), ("lse", True), ("info_nce", False)]
)
def test_mean_loss_held_and_streamed_agree(loss: str, shared: bool) -> None:
    """A sample of blocks held whole in float64 (under `hold` values) and the same streamed block
    by block (hold 0) give the same value and gradient, up to summation order."""
    views = _easy_views()
    sample = draw(views, 30, 4, shared, _gen(0))
    blocks = [(views, part) for part in _slices(sample, [11, 11, 8])]
    assert mean_loss_values(blocks) == ((2 * 30 + 4) if shared else 6 * 30) * views.anchor.shape[1]
    held = mean_loss(blocks, 2, loss, 0.5)
    streamed = mean_loss(blocks, 2, loss, 0.5, hold=0)
    for seed in range(3):
        point = torch.randn(2 * views.anchor.shape[1], generator=_gen(seed), dtype=torch.float64)
        assert held[0](point) == pytest.approx(streamed[0](point), rel=1e-12)
        (a, ga), (b, gb) = held[1](point), streamed[1](point)
        assert a == pytest.approx(b, rel=1e-12)
        torch.testing.assert_close(ga, gb, atol=1e-12, rtol=1e-10)


# --- per_anchor_loss and scores -----------------------------------------------------------------


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("shared", [False, True])
def test_per_anchor_loss_chunked_equals_unchunked(loss: str, shared: bool) -> None:
    views = _views(rows=50)
    sample = draw(views, 23, 4, shared, _gen(3))
    weight = torch.randn(3, 5, generator=_gen(8))
    whole = per_anchor_loss(weight, views, sample, loss, 0.5)
    assert whole.shape == (23,) and whole.dtype == torch.float64
    for chunk in (1, 4, 22, 23):
        assert torch.allclose(per_anchor_loss(weight, views, sample, loss, 0.5, chunk), whole)


def test_per_anchor_loss_matches_the_objective_on_the_rows() -> None:
    base = _views(rows=30)
    views = Views(base.anchor, base.anchor.flip(0), base.anchor * 0.5, base.labels, True)
    sample = draw(views, 12, 3, False, _gen(6))
    weight = torch.randn(2, 5, generator=_gen(1))
    fa = views.anchor[sample.anchors] @ weight.T
    fp = views.positive[sample.positives] @ weight.T
    fn = views.negative[sample.negatives] @ weight.T
    for loss in LOSSES:
        expected = objective(fa, fp, fn, False, loss, 0.5).double()
        assert torch.allclose(per_anchor_loss(weight, views, sample, loss, 0.5, 5), expected)
    hinge = losses.k_negative(losses.k_negative_margins(fa, fp, fn), loss="hinge")
    assert torch.allclose(per_anchor_loss(weight, views, sample, "hinge", 0.5), hinge.double())


@pytest.mark.parametrize("shared", [False, True])
def test_scores_match_a_naive_loop(shared: bool) -> None:
    base = _views(rows=25, dtype=torch.float64)
    views = Views(base.anchor, base.anchor.roll(1, 0), base.anchor * -0.5, base.labels, True)
    sample = draw(views, 7, 3, shared, _gen(2))
    weight = torch.randn(4, 5, generator=_gen(3), dtype=torch.float64)
    pos, neg = scores(weight, views, sample)
    assert pos.shape == (7,) and neg.shape == (7, 3) and pos.dtype == torch.float64

    def f(table: torch.Tensor, i: int) -> list[float]:
        return [sum(weight[r, c].item() * table[i, c].item() for c in range(5)) for r in range(4)]

    def dot(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    for i in range(7):
        fa = f(views.anchor, int(sample.anchors[i]))
        assert pos[i].item() == pytest.approx(dot(fa, f(views.positive, int(sample.positives[i]))))
        for j in range(3):
            k = int(sample.negatives[j] if shared else sample.negatives[i, j])
            assert neg[i, j].item() == pytest.approx(dot(fa, f(views.negative, k)), rel=1e-12)


def test_sample_shared_property() -> None:
    own = Sample(torch.arange(3), torch.arange(3), torch.zeros(3, 2, dtype=torch.long))
    shared = Sample(torch.arange(3), torch.arange(3), torch.zeros(2, dtype=torch.long))
    assert not own.shared and shared.shared
