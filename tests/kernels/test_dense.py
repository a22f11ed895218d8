"""crl.dense: Dense InfoNCE against a float64 loop, chunking, bound, correspondences, queue, EMA."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from crl import dense
from crl.kernels.dense import info_nce as kernels_dense


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _unit(*shape: int, seed: int) -> torch.Tensor:
    return F.normalize(torch.randn(*shape, generator=_gen(seed), dtype=torch.float64), dim=-1)


def _pairs(rows: list[tuple[int, int, int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int64)


# (b, k1, k2) over B=3 images, K1=4, K2=6: (0,0) and (2,3) have two positives, image 1 has one
PAIRS = _pairs([(0, 0, 1), (0, 0, 2), (0, 1, 5), (1, 2, 0), (2, 3, 3), (2, 3, 4), (2, 0, 0)])


def ref_dense(v1, v2, pairs, T, queue=None):
    """Per-pair L_local and the three-level mean, transcribed from docs/theory/statements.md C with
    loops."""
    v1, v2, rows = v1.tolist(), v2.tolist(), pairs.tolist()
    queue = [] if queue is None else queue.tolist()

    def e(a: list[float], u: list[float]) -> float:
        return math.exp(sum(x * y for x, y in zip(a, u, strict=True)) / T)

    per_pair = []
    for b, k1, k2 in rows:
        a = v1[b][k1]
        positives = {q for bb, kk1, q in rows if (bb, kk1) == (b, k1)}
        negatives = [
            v2[bb][k]
            for bb in range(len(v2))
            for k in range(len(v2[bb]))
            if not (bb == b and k in positives)
        ] + queue
        num = e(a, v2[b][k2])
        per_pair.append(-math.log(num / (num + sum(e(a, u) for u in negatives))))
    by_position: dict[tuple[int, int], list[float]] = {}
    for (b, k1, _), loss in zip(rows, per_pair, strict=True):
        by_position.setdefault((b, k1), []).append(loss)
    by_image: dict[int, list[float]] = {}
    for (b, _), ls in by_position.items():
        by_image.setdefault(b, []).append(sum(ls) / len(ls))
    mean = sum(sum(ls) / len(ls) for ls in by_image.values()) / len(by_image)
    return per_pair, mean


@pytest.mark.parametrize("with_queue", [False, True])
@pytest.mark.parametrize("T", [0.2, 1.0])
def test_dense_info_nce_matches_loop(with_queue: bool, T: float) -> None:
    v1, v2 = _unit(3, 4, 5, seed=1), _unit(3, 6, 5, seed=2)
    queue = _unit(7, 5, seed=3) if with_queue else None
    per_pair, mean = ref_dense(v1, v2, PAIRS, T, queue)
    got = dense.dense_info_nce(v1, v2, PAIRS, T, queue=queue, reduction="none")
    torch.testing.assert_close(got.tolist(), per_pair, rtol=1e-12, atol=1e-12)
    assert dense.dense_info_nce(v1, v2, PAIRS, T, queue=queue).item() == pytest.approx(
        mean, rel=1e-12
    )


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 1000])
def test_chunked_equals_unchunked(chunk: int) -> None:
    v1, v2, queue = _unit(3, 4, 5, seed=4), _unit(3, 6, 5, seed=5), _unit(9, 5, seed=6)
    whole = dense.dense_info_nce(
        v1, v2, PAIRS, 0.3, queue=queue, chunk=len(PAIRS), reduction="none"
    )
    parts = dense.dense_info_nce(v1, v2, PAIRS, 0.3, queue=queue, chunk=chunk, reduction="none")
    torch.testing.assert_close(parts, whole, rtol=0, atol=1e-6)


def test_empty_queue_is_no_queue() -> None:
    v1, v2 = _unit(3, 4, 5, seed=4), _unit(3, 6, 5, seed=5)
    empty = torch.zeros(0, 5, dtype=torch.float64)
    torch.testing.assert_close(
        dense.dense_info_nce(v1, v2, PAIRS, 0.3, queue=empty),
        dense.dense_info_nce(v1, v2, PAIRS, 0.3),
    )


def test_gradcheck_and_no_gradient_into_queue() -> None:
    v1 = _unit(3, 4, 3, seed=7).requires_grad_()
    v2 = _unit(3, 6, 3, seed=8).requires_grad_()
    queue = _unit(4, 3, seed=9).requires_grad_()

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return dense.dense_info_nce(a, b, PAIRS, 0.5, queue=queue, chunk=3)

    assert torch.autograd.gradcheck(f, (v1, v2))
    f(v1, v2).backward()
    assert queue.grad is None


def test_identical_features_give_log_contrast_size() -> None:
    """All features equal: every logit is equal, so L_local = log N and the MI bound is 0."""
    v1 = F.normalize(torch.ones(3, 4, 5, dtype=torch.float64), dim=-1)
    v2 = F.normalize(torch.ones(3, 6, 5, dtype=torch.float64), dim=-1)
    queue = v2[0, :5]
    losses = dense.dense_info_nce(v1, v2, PAIRS, 0.1, queue=queue, reduction="none")
    n = dense.dense_contrast_size(PAIRS, batch=3, k2=6, queue_size=5)
    assert n.tolist() == [1 + 18 - 2 + 5] * 2 + [1 + 18 - 1 + 5] * 2 + [1 + 18 - 2 + 5] * 2 + [23]
    torch.testing.assert_close(losses, torch.log(n.double()))
    torch.testing.assert_close(dense.mi_lower_bound(losses, n), torch.zeros(7, dtype=torch.float64))


def test_float32_small_temperature_is_finite() -> None:
    v1 = _unit(2, 4, 8, seed=10).float().requires_grad_()
    v2 = _unit(2, 6, 8, seed=11).float().requires_grad_()
    pairs = _pairs([(0, 0, 0), (1, 3, 5)])
    loss = dense.dense_info_nce(v1, v2, pairs, 1e-4, queue=_unit(16, 8, seed=12).float())
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(v1.grad).all() and torch.isfinite(v2.grad).all()


def test_mi_lower_bound() -> None:
    loss = torch.tensor([0.5, 2.0], dtype=torch.float64)
    torch.testing.assert_close(dense.mi_lower_bound(loss, 10), math.log(10) - loss)
    torch.testing.assert_close(
        dense.mi_lower_bound(loss, torch.tensor([4, 8])), torch.log(torch.tensor([4.0, 8.0])) - loss
    )
    with pytest.raises(ValueError, match="^contrast_size"):
        dense.mi_lower_bound(loss, 0)
    with pytest.raises(ValueError, match="^contrast_size"):
        dense.mi_lower_bound(loss, torch.tensor([3, 0]))


@pytest.mark.parametrize("with_queue", [False, True])
@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1000])
def test_chunked_path_equals_direct_path_values_and_gradients(with_queue: bool, chunk: int) -> None:
    """The hand-written backward of the chunked path against autograd through the direct one."""
    queue = _unit(9, 5, seed=6) if with_queue else None
    results = []
    for path in ("direct", "chunked"):
        v1 = _unit(3, 4, 5, seed=4).requires_grad_()
        v2 = _unit(3, 6, 5, seed=5).requires_grad_()
        per = dense.dense_info_nce(
            v1, v2, PAIRS, 0.3, queue=queue, chunk=chunk, reduction="none", path=path
        )
        mean = dense.dense_info_nce(v1, v2, PAIRS, 0.3, queue=queue, chunk=chunk, path=path)
        weights = torch.linspace(0.5, 2.0, len(PAIRS), dtype=torch.float64)
        grads = torch.autograd.grad((per * weights).sum() + mean, (v1, v2))
        results.append((per, mean, grads))
    (p0, m0, g0), (p1, m1, g1) = results
    torch.testing.assert_close(p1, p0, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(m1, m0, rtol=1e-13, atol=1e-13)
    for a, b in zip(g1, g0, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


def test_chunked_path_gradcheck_and_no_gradient_into_queue() -> None:
    v1 = _unit(3, 4, 3, seed=7).requires_grad_()
    v2 = _unit(3, 6, 3, seed=8).requires_grad_()
    queue = _unit(4, 3, seed=9).requires_grad_()

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return dense.dense_info_nce(a, b, PAIRS, 0.5, queue=queue, chunk=3, path="chunked")

    assert torch.autograd.gradcheck(f, (v1, v2))
    f(v1, v2).backward()
    assert queue.grad is None


def test_chunked_path_float32_small_temperature_is_finite() -> None:
    v1 = _unit(2, 4, 8, seed=10).float().requires_grad_()
    v2 = _unit(2, 6, 8, seed=11).float().requires_grad_()
    pairs = _pairs([(0, 0, 0), (1, 3, 5)])
    queue = _unit(16, 8, seed=12).float()
    loss = dense.dense_info_nce(v1, v2, pairs, 1e-4, queue=queue, chunk=1, path="chunked")
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(v1.grad).all() and torch.isfinite(v2.grad).all()


def test_auto_path_switches_at_direct_max_logits(monkeypatch: pytest.MonkeyPatch) -> None:
    """P (B*K2 + Q) = 7 * (18 + 9) = 189 logits: direct at the threshold, chunked above it."""
    v1 = _unit(3, 4, 5, seed=4).requires_grad_()
    v2, queue = _unit(3, 6, 5, seed=5), _unit(9, 5, seed=6)
    names = []
    for limit in (189, 188):
        monkeypatch.setattr(kernels_dense, "DIRECT_MAX_LOGITS", limit)
        out = dense.dense_info_nce(v1, v2, PAIRS, 0.3, queue=queue, reduction="none")
        names.append(type(out.grad_fn).__name__)
    assert "Chunked" not in names[0] and "Chunked" in names[1]


# ---- correspondences ----


def test_geometric_identical_boxes_give_identity() -> None:
    got = dense.geometric_correspondence((0, 0, 7, 7), (0, 0, 7, 7), (7, 7), (7, 7))
    assert got.dtype == torch.int64
    assert got.tolist() == [[k, k] for k in range(49)]
    both = dense.geometric_correspondence((0, 0, 7, 7), (0, 0, 7, 7), (7, 7), (7, 7), True, True)
    assert both.tolist() == [[k, k] for k in range(49)]


def test_geometric_flip_mirrors_columns() -> None:
    got = dense.geometric_correspondence((0, 0, 3, 2), (0, 0, 3, 2), (2, 3), (2, 3), flip1=True)
    assert got.tolist() == [[0, 2], [1, 1], [2, 0], [3, 5], [4, 4], [5, 3]]


def test_geometric_disjoint_boxes_give_none() -> None:
    got = dense.geometric_correspondence((0, 0, 4, 4), (5, 0, 9, 4), (2, 2), (2, 2))
    assert got.shape == (0, 2)


def test_geometric_half_overlap() -> None:
    # view 1 cell centres: x in {1, 3}; view 2 covers [2, 6) in cell columns [2, 4), [4, 6)
    got = dense.geometric_correspondence((0, 0, 4, 4), (2, 0, 6, 4), (2, 2), (2, 2))
    assert got.tolist() == [[1, 0], [3, 2]]
    flipped = dense.geometric_correspondence((0, 0, 4, 4), (2, 0, 6, 4), (2, 2), (2, 2), flip2=True)
    assert flipped.tolist() == [[1, 1], [3, 3]]


def test_geometric_centre_on_a_cell_edge_goes_to_the_cell_above_it() -> None:
    """Box 1 rows [7, 33) / 7: row 5's centre is 7 + 5.5 * 26/7 = 27.43 = 12 + 4 * 27/7, the edge
    between rows 3 and 4 of box 2 [12, 39) / 7; half-open cells put it in row 4 (computing the
    centre first and dividing again rounded it into row 3)."""
    got = dense.geometric_correspondence((23, 7, 51, 33), (17, 12, 44, 39), (7, 7), (7, 7))
    assert dict(got.tolist())[35] == 4 * 7 + 2


def test_geometric_different_grids() -> None:
    # 2x2 cells of a 4x4 box have centres (1|3, 1|3); the 4x4 grid has unit cells
    fine = dense.geometric_correspondence((0, 0, 4, 4), (0, 0, 4, 4), (2, 2), (4, 4))
    assert fine.tolist() == [[0, 5], [1, 7], [2, 13], [3, 15]]
    coarse = dense.geometric_correspondence((0, 0, 4, 4), (0, 0, 4, 4), (4, 4), (2, 2))
    assert coarse.tolist() == [[k, (k // 8) * 2 + (k % 4) // 2] for k in range(16)]


def test_argmax_correspondence_recovers_permutation() -> None:
    f1 = torch.randn(6, 4, generator=_gen(1), dtype=torch.float64)
    perm = torch.randperm(6, generator=_gen(2))
    f2 = 3.0 * f1[perm]  # f2[j] = 3 f1[perm[j]], so k1 matches j with perm[j] = k1
    got = dense.argmax_correspondence(f1, f2)
    assert got.tolist() == [[k, int(torch.argsort(perm)[k])] for k in range(6)]
    batched = dense.argmax_correspondence(torch.stack([f1, f1]), torch.stack([f2, f1]))
    expect = [[0, k, j] for k, j in got.tolist()] + [[1, k, k] for k in range(6)]
    assert batched.tolist() == expect


def test_batch_pairs() -> None:
    got = dense.batch_pairs(
        [_pairs([(0, 1)]), torch.zeros(0, 2, dtype=torch.int64), _pairs([(2, 3), (4, 5)])]
    )
    assert got.tolist() == [[0, 0, 1], [2, 2, 3], [2, 4, 5]]


# ---- queue and momentum ----


def test_feature_queue_fifo() -> None:
    q = dense.FeatureQueue(size=5, dim=2, dtype=torch.float64)
    keys = torch.arange(24, dtype=torch.float64).reshape(12, 2)  # key j is row j
    assert q.tensor().shape == (0, 2) and len(q) == 0
    q.enqueue(keys[:3])
    torch.testing.assert_close(q.tensor(), keys[:3])
    snapshot = q.tensor()
    q.enqueue(keys[3:7])  # keys 5, 6 wrap into slots 0, 1
    torch.testing.assert_close(q.tensor(), keys[[5, 6, 2, 3, 4]])
    torch.testing.assert_close(snapshot, keys[:3])
    assert int(q.ptr) == 2 and len(q) == 5
    big = torch.arange(24, 48, dtype=torch.float64).reshape(12, 2)
    q.enqueue(big)  # big[j] -> slot (2 + j) % 5: the last 5 remain
    assert int(q.ptr) == (2 + 12) % 5
    torch.testing.assert_close(q.tensor(), big[[8, 9, 10, 11, 7]])
    assert set(q.state_dict()) == {"keys", "ptr", "filled"}


def test_feature_queue_detaches_and_validates() -> None:
    q = dense.FeatureQueue(4, 3)
    q.enqueue(torch.randn(2, 3, generator=_gen(0), requires_grad=True))
    assert not q.tensor().requires_grad
    with pytest.raises(ValueError, match="^keys"):
        q.enqueue(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="^size"):
        dense.FeatureQueue(0, 3)


def _net(seed: int) -> torch.nn.Module:
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    gen = _gen(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    return net


@pytest.mark.parametrize("m", [0.0, 0.9, 1.0])
def test_momentum_update(m: float) -> None:
    online, target = _net(0), _net(1)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    dense.momentum_update(online, target, m)
    for name, p in online.named_parameters():
        q = dict(target.named_parameters())[name]
        torch.testing.assert_close(q, m * before[name] + (1 - m) * p)
        assert q.grad is None and q.grad_fn is None


def test_momentum_update_validates() -> None:
    online = _net(0)
    for bad in (1.5, -0.1, float("nan"), True):
        with pytest.raises(ValueError, match="^momentum"):
            dense.momentum_update(online, _net(1), bad)
    with pytest.raises(ValueError, match="^target"):
        dense.momentum_update(online, torch.nn.Linear(3, 4), 0.5)
    wide = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    with pytest.raises(ValueError, match="^target"):
        dense.momentum_update(online, wide, 0.5)


# ---- validation and purity ----

V1, V2 = _unit(3, 4, 5, seed=1), _unit(3, 6, 5, seed=2)

BAD = [
    (lambda: dense.dense_info_nce(V1, V2, PAIRS, 0.0), "temperature"),
    (lambda: dense.dense_info_nce(V1, V2, PAIRS, 0.5, chunk=0), "chunk"),
    (lambda: dense.dense_info_nce(V1, V2, PAIRS, 0.5, reduction="sum"), "reduction"),
    (lambda: dense.dense_info_nce(V1, V2, PAIRS, 0.5, path="fast"), "path"),
    (lambda: dense.dense_info_nce(V1[0], V2, PAIRS, 0.5), "v1"),
    (lambda: dense.dense_info_nce(V1, V2[:2], PAIRS, 0.5), "v2"),
    (lambda: dense.dense_info_nce(V1, V2.float(), PAIRS, 0.5), "v2"),
    (lambda: dense.dense_info_nce(V1, V2, PAIRS, 0.5, queue=torch.zeros(3, 4)), "queue"),
    (lambda: dense.dense_info_nce(V1, V2, PAIRS[:, :2], 0.5), "pairs"),
    (lambda: dense.dense_info_nce(V1, V2, PAIRS.int(), 0.5), "pairs"),
    (lambda: dense.dense_info_nce(V1, V2, PAIRS[:0], 0.5), "pairs"),
    (lambda: dense.dense_info_nce(V1, V2, _pairs([(0, 0, 6)]), 0.5), "pairs"),
    (lambda: dense.dense_info_nce(V1, V2, _pairs([(3, 0, 0)]), 0.5), "pairs"),
    (lambda: dense.dense_info_nce(V1, V2, _pairs([(0, 0, 1), (0, 0, 1)]), 0.5), "pairs"),
    (lambda: dense.geometric_correspondence((0, 0, 0, 1), (0, 0, 1, 1), (2, 2), (2, 2)), "box1"),
    (lambda: dense.geometric_correspondence((0, 0, 1, 1), (0, 0, 1), (2, 2), (2, 2)), "box2"),
    (lambda: dense.geometric_correspondence((0, 0, 1, 1), (0, 0, 1, 1), (0, 2), (2, 2)), "grid1"),
    (lambda: dense.geometric_correspondence((0, 0, 1, 1), (0, 0, 1, 1), (2, 2), 2), "grid2"),
    (lambda: dense.argmax_correspondence(V1, V2[:2]), "f2"),
    (lambda: dense.argmax_correspondence(V1[0, 0], V2[0]), "f1"),
    (lambda: dense.dense_contrast_size(PAIRS, 0, 6), "batch"),
    (lambda: dense.batch_pairs([]), "per_image"),
]


@pytest.mark.parametrize("call,name", BAD)
def test_bad_inputs_raise_value_error_naming_argument(call, name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call()


def test_kernels_import_neither_prefect_nor_ray() -> None:
    code = (
        "import sys, crl.losses, crl.dense; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('prefect', 'ray')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
