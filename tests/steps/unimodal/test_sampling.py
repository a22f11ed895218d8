"""crl.steps.unimodal.sampling and .certify: where a cell's tuples come from, and its bounds."""

from __future__ import annotations

import gc
import math
import weakref

import numpy as np
import pytest
import torch

from crl.kernels import certified
from crl.kernels.latent import LatentClassModel
from crl.steps.features import Normalizer, SplitArrays
from crl.steps.unimodal import certify, sampling

ScratchTables = sampling.ScratchBlocks.TABLES


def _model() -> LatentClassModel:
    return LatentClassModel.synthetic(
        classes=3,
        dim=5,
        separation=2.0,
        noise=1.0,
        prior="uniform",
        zipf_exponent=1.0,
        generator=torch.Generator().manual_seed(0),
    )


def _population() -> sampling.ModelPopulation:
    return sampling.ModelPopulation(
        _model(), torch.nn.Identity(), Normalizer(np.zeros(5, dtype=np.float32), 2.0)
    )


def _statistics(draw: sampling.TrainDraw, m: int, chunk: int = 65536) -> certified.SampleStats:
    """The sample statistics of every block, fed as the cell's one pass feeds them."""
    acc = certify.statistics_accumulator(draw, m)
    for views, sample in draw:
        certify.feed_statistics(acc, views, sample, chunk)
    return acc.finish()


def test_normalizer_clips_every_point_and_matches_the_splits_scaling() -> None:
    norm = Normalizer(np.array([1.0, -1.0], dtype=np.float32), 3.0)
    inside = np.array([[1.0, 0.0], [2.0, -2.0]], dtype=np.float32)
    np.testing.assert_allclose(norm.array(inside), (inside - norm.mean) / (3.0 * (1 + 1e-6)))
    far = np.array([[100.0, 50.0]], dtype=np.float32)
    assert float(np.linalg.norm(norm.array(far))) <= 1.0
    torch.testing.assert_close(norm(torch.from_numpy(inside)), torch.from_numpy(norm.array(inside)))
    assert float(norm(torch.from_numpy(far)).norm()) <= 1.0


@pytest.mark.parametrize("shared", [False, True])
def test_model_population_draws_fresh_tuples(shared: bool) -> None:
    draw = _population().train(7, 3, shared, torch.Generator().manual_seed(1))
    assert draw.sampling == sampling.FRESH and draw.certified
    assert len(draw) == 1 and draw.n == 7
    views, sample = draw[0]
    assert views.anchor.shape == views.positive.shape == (7, 5)
    assert views.negative.shape == ((3, 5) if shared else (21, 5))
    assert sample.shared == shared
    assert sample.negatives.shape == ((3,) if shared else (7, 3))
    for table in (views.anchor, views.positive, views.negative):
        assert float(table.norm(dim=1).max()) <= 1.0
    again = _population().train(7, 3, shared, torch.Generator().manual_seed(1))
    torch.testing.assert_close(again[0][0].negative, views.negative)
    held = _population().held_out(4, 3, 11, torch.Generator().manual_seed(2))
    assert held.sample.negatives.shape == (4, 3) and held.pool_sample.negatives.shape == (11,)
    assert held.pool_views.anchor is held.views.anchor


def _split(rows: int, classes: int, augmented: bool = False) -> SplitArrays:
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 4, generator=gen).numpy() / 3
    labels = (np.arange(rows) % classes).astype(np.int32)
    if augmented:
        return SplitArrays(x, labels, x + 0.01, x - 0.01)
    return SplitArrays(x, labels)


@pytest.mark.parametrize("shared", [False, True])
def test_split_population_distinct_rows_when_the_split_allows(shared: bool) -> None:
    population = sampling.SplitPopulation(_split(200, 4), _split(50, 4))
    draw = population.train(10, 5, shared, torch.Generator().manual_seed(3))
    assert draw.sampling == sampling.DISTINCT and draw.certified
    views, s = draw[0]
    used = torch.cat([s.anchors, s.positives, s.negatives.reshape(-1)])
    assert len(set(used.tolist())) == used.numel()  # every point distinct
    assert torch.equal(views.labels[s.anchors], views.labels[s.positives])


def test_split_population_reuses_points_and_is_not_certified_when_too_small() -> None:
    population = sampling.SplitPopulation(_split(40, 4), _split(20, 4))
    draw = population.train(10, 5, False, torch.Generator().manual_seed(4))  # needs 70 > 40
    assert draw.sampling == sampling.REUSE and not draw.certified
    assert draw[0][1].negatives.shape == (10, 5)


def test_split_population_augmented_positive_is_the_other_view() -> None:
    population = sampling.SplitPopulation(_split(100, 3, augmented=True), _split(30, 3))
    draw = population.train(10, 4, False, torch.Generator().manual_seed(5))
    assert draw.sampling == sampling.DISTINCT
    views, sample = draw[0]
    assert torch.equal(sample.anchors, sample.positives)
    assert views.anchor is not views.positive


def test_sample_statistics_stream_equals_the_whole_sample() -> None:
    draw = _population().train(9, 4, False, torch.Generator().manual_seed(6))
    streamed = _statistics(draw, 4, chunk=8)  # two anchors per chunk
    v, s = draw[0]
    whole = certified.sample_stats(
        v.anchor[s.anchors], v.positive[s.positives], v.negative[s.negatives], shared=False
    )
    for name in ("S_pairs", "S_neg", "v_A", "v_0", "v_N"):
        assert getattr(streamed, name) == pytest.approx(getattr(whole, name), rel=1e-12)


# --- blocks ------------------------------------------------------------------------------------


@pytest.mark.parametrize("shared", [False, True])
def test_model_population_streams_blocks_made_again_bit_for_bit(shared: bool) -> None:
    per_anchor = 2 if shared else 5  # (2 + m) rows of p = 5 values per anchor, m = 3
    elements = 3 * per_anchor * 5  # 3 anchors a block
    draw = _population().train(10, 3, shared, torch.Generator().manual_seed(1), elements)
    assert draw.sizes == [3, 3, 3, 1] and len(draw) == 4 and draw.n == 10
    first = [tuple(t.clone() for t in (v.anchor, v.positive, v.negative)) for v, _ in draw]
    for b in (2, 0, 3, 0):  # out of order: each block is made again from its own generator
        views, sample = draw[b]
        for got, kept in zip((views.anchor, views.positive, views.negative), first[b], strict=True):
            assert torch.equal(got, kept)
        assert sample.anchors.shape == (draw.sizes[b],)
        assert sample.negatives.shape == ((3,) if shared else (draw.sizes[b], 3))
        for table in (views.anchor, views.positive, views.negative):
            assert float(table.norm(dim=1).max()) <= 1.0
    assert not torch.equal(first[0][0], first[1][0])  # blocks are different draws
    if shared:  # one shared table in every block
        assert all(torch.equal(f[2], first[0][2]) for f in first)
    again = _population().train(10, 3, shared, torch.Generator().manual_seed(1), elements)
    assert torch.equal(again[3][0].anchor, first[3][0])
    with pytest.raises(IndexError, match="block 4: the draw has 4 blocks"):
        draw[4]


def test_streamed_model_blocks_are_read_back_from_an_unlinked_scratch_file() -> None:
    """The first pass makes each block and appends its tables; later passes read them back (the
    maker is not called again), equal bit for bit to a fresh draw's blocks; the file has no
    name in the file system, and is closed when the draw is dropped."""
    draw = _population().train(10, 3, False, torch.Generator().manual_seed(2), 3 * 5 * 5)
    store = draw._make
    assert isinstance(store, sampling.ScratchBlocks)
    made = [(b, views.labels.clone()) for b, (views, _) in enumerate(draw)]
    assert isinstance(store.file.name, int)  # a descriptor, not a path: unlinked at creation
    assert store.file.seek(0, 2) == sum(
        sum(getattr(views, t).numel() * getattr(views, t).element_size() for t in ScratchTables)
        for views, _ in (store._make(b) for b in range(4))
    )

    def refuse(b: int) -> None:
        raise AssertionError(f"block {b} made again")

    store._make = refuse
    fresh = _population().train(10, 3, False, torch.Generator().manual_seed(2), 3 * 5 * 5)
    for b, labels in [*made, *made[::-1]]:
        views, sample = draw[b]
        other, other_sample = fresh[b]
        for table in ScratchTables:
            assert torch.equal(getattr(views, table), getattr(other, table))
        assert torch.equal(views.labels, labels) and views.labels.dtype == torch.int64
        assert torch.equal(sample.negatives, other_sample.negatives)
    scratch = weakref.ref(store.file)
    del draw, store
    gc.collect()
    assert scratch() is None  # closed and gone with the draw


def test_a_sample_of_one_block_is_drawn_as_a_whole() -> None:
    whole = _population().train(10, 3, False, torch.Generator().manual_seed(1), 10**9)
    fits = _population().train(10, 3, False, torch.Generator().manual_seed(1), 10 * 5 * 5)
    assert len(whole) == len(fits) == 1
    assert torch.equal(whole[0][0].negative, fits[0][0].negative)


@pytest.mark.parametrize("shared", [False, True])
def test_split_blocks_hold_the_rows_of_the_whole_sample(shared: bool) -> None:
    population = sampling.SplitPopulation(_split(400, 4), _split(50, 4))
    whole = population.train(20, 5, shared, torch.Generator().manual_seed(3), 10**9)
    elements = 6 * (2 if shared else 7) * 4  # 6 anchors of (2 + m) rows (2 shared) of p = 4
    blocks = population.train(20, 5, shared, torch.Generator().manual_seed(3), elements)
    assert len(whole) == 1 and blocks.sizes == [6, 6, 6, 2] and blocks.sampling == whole.sampling
    views, sample = whole[0]
    rows = {"anchor": [], "positive": [], "negative": []}
    for block_views, block_sample in blocks:  # each block indexes tables of its own rows
        for name, index in (
            ("anchor", block_sample.anchors),
            ("positive", block_sample.positives),
            ("negative", block_sample.negatives),
        ):
            rows[name].append(getattr(block_views, name)[index])
        assert block_views.anchor.shape[0] == block_sample.anchors.shape[0]
    assert torch.equal(torch.cat(rows["anchor"]), views.anchor[sample.anchors])
    assert torch.equal(torch.cat(rows["positive"]), views.positive[sample.positives])
    negatives = rows["negative"][0] if shared else torch.cat(rows["negative"])
    assert torch.equal(negatives, views.negative[sample.negatives])
    assert all(torch.equal(r, negatives) for r in rows["negative"]) or not shared
    streamed = _statistics(blocks, 5, chunk=10)
    held = _statistics(whole, 5)
    for name in ("S_pairs", "S_neg", "v_A", "v_0", "v_N"):
        assert getattr(streamed, name) == pytest.approx(getattr(held, name), rel=1e-12)


def test_pool_bootstrap_matches_a_naive_loop() -> None:
    gen = torch.Generator().manual_seed(7)
    pos = torch.randn(6, generator=gen, dtype=torch.float64)
    pool = torch.randn(6, 9, generator=gen, dtype=torch.float64)
    T, draws = 0.5, 50
    got = certify.pool_bootstrap_ci(pos, pool, T, draws, torch.Generator().manual_seed(8))
    replay = torch.Generator().manual_seed(8)
    picks = torch.randint(0, 9, (draws, 9), generator=replay)
    risks = []
    for b in range(draws):
        z = (pool[:, picks[b]] - pos[:, None]) / T
        risks.append(float((T * (torch.logsumexp(z, dim=1) - math.log(9))).mean()))
    expected = 1.959963984540054 * float(torch.tensor(risks, dtype=torch.float64).std())
    assert got == pytest.approx(expected, rel=1e-10)
    assert math.isnan(certify.pool_bootstrap_ci(pos, pool, T, 1, gen))


def test_bound_columns_compare_each_bound_with_its_gap() -> None:
    draw = _population().train(30, 4, True, torch.Generator().manual_seed(9))
    shared = _statistics(draw, 4)
    logistic = certify.Setting("sscrl", "logistic", 4, 3, 1.0, 1.0, 0.05)
    row = certify.bound_columns(draw, shared, logistic, 0.01, -0.02)
    assert row["bound_delta"] == 0.025
    assert row["gamma_S_holds"] is True  # compared with gap_outer
    too_big = certify.bound_columns(draw, shared, logistic, 0.01, 99.0)
    assert too_big["gamma_S_holds"] is False and too_big["gamma_m_holds"] is False
    assert too_big["sscrl_total_holds"] is True  # the total gap 0.01 is within the total
    own = sampling.ModelPopulation(
        _model(), torch.nn.Identity(), Normalizer(np.zeros(5, dtype=np.float32), 2.0)
    )
    scrl = own.train(30, 4, False, torch.Generator().manual_seed(9))
    stats = _statistics(scrl, 4)
    setting = certify.Setting("scrl", "lse", 4, 3, 1.0, 1.0, 0.05)
    lse = certify.bound_columns(scrl, stats, setting, 0.0, None)
    g = certify.simultaneous_best(stats, certified.loss_constants("lse", 4, 1.0, 1.0), 4, 3, 0.05)
    assert g > min(lse["gamma_m"], lse["gamma_S"], lse["gamma_E"])  # each form at delta / 2
    # LSE: -gamma <= gap <= gamma + inner; a gap just above gamma holds only thanks to inner
    upper = lse["gamma_S"] + 0.5 * lse["lse_inner_bound"]
    above = certify.bound_columns(scrl, stats, setting, upper, None)
    assert above["gamma_S_holds"] is True
    below = certify.bound_columns(scrl, stats, setting, -(lse["gamma_S"] + 1e-3), None)
    assert below["gamma_S_holds"] is False
    assert lse["best_bound"] == pytest.approx(g + lse["lse_inner_bound"])
