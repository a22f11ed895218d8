"""crl.rademacher against exhaustive enumeration, naive loops and a Python splitmix64 reference."""

from __future__ import annotations

import itertools
import math
from statistics import NormalDist

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from crl import rademacher

MASK = (1 << 64) - 1


def _randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ---- naive references ----


def ref_mix(z: int) -> int:
    """splitmix64 finaliser, transcribed from Steele, Lea & Flood (2014)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def ref_sign(seed: int, draw: int, row: int, coord: int) -> int:
    """The documented key layout, one sign at a time."""
    key = ref_mix(ref_mix(seed) ^ (draw // 64))
    word = ref_mix((key + 0x9E3779B97F4A7C15 * ((row << 24) + coord)) & MASK)
    return -1 if (word >> (draw % 64)) & 1 else 1


def ref_exact_finite(values: torch.Tensor) -> float:
    """E_eps max_k sum_{j,t} eps_jt values[k, j, t] by a Python loop over all patterns."""
    K, N, d = values.shape
    v = values.tolist()
    total = 0.0
    for eps in itertools.product((-1.0, 1.0), repeat=N * d):
        total += max(
            sum(eps[j * d + t] * v[k][j][t] for j in range(N) for t in range(d)) for k in range(K)
        )
    return total / 2 ** (N * d)


def ref_sign_products(features: torch.Tensor, d: int, draws: int, seed: int) -> torch.Tensor:
    """G_k = S_k^T Phi in float64 from the explicit sign tensor. Shape: (draws, d, p)."""
    eps = rademacher.signs(seed, draws, 0, features.shape[0], d, torch.float64)  # (draws, N, d)
    return torch.einsum("knt,nq->ktq", eps, features.to(torch.float64))


# ---- the sign stream ----


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**63 + 17, 2**64 - 1])
def test_signs_match_python_reference(seed: int) -> None:
    eps = rademacher.signs(seed, 130, 1_000_000, 3, 5)  # (draws, rows, coords)
    for draw, row, coord in itertools.product((0, 1, 63, 64, 100, 129), range(3), range(5)):
        assert eps[draw, row, coord].item() == ref_sign(seed, draw, 1_000_000 + row, coord)


def test_signs_are_a_pure_function_of_the_key() -> None:
    full = rademacher.signs(7, 200, 0, 50, 6, torch.float64)
    assert torch.equal(rademacher.signs(7, 200, 0, 50, 6, torch.float64), full)
    assert torch.equal(rademacher.signs(7, 200, 20, 10, 6, torch.float64), full[:, 20:30])
    assert torch.equal(rademacher.signs(7, 200, 0, 50, 3, torch.float64), full[:, :, :3])
    assert torch.equal(rademacher.signs(7, 5, 0, 50, 6, torch.float64), full[:5])
    other = rademacher.signs(8, 200, 0, 50, 6, torch.float64)
    assert (other != full).double().mean().item() == pytest.approx(0.5, abs=0.02)


def test_signs_are_balanced_and_uncorrelated() -> None:
    eps = rademacher.signs(99, 1024, 0, 64, 8, torch.float64)  # (draws, rows, coords)
    assert set(eps.unique().tolist()) == {-1.0, 1.0}
    x = eps.reshape(1024, -1)  # (draws, positions)
    assert abs(x.mean().item()) < 4 / math.sqrt(x.numel())
    across_positions = x.T @ x / x.shape[0]  # (positions, positions), off-diagonal ~ N(0, 1/draws)
    off = across_positions - torch.eye(x.shape[1], dtype=torch.float64)
    assert off.abs().max().item() < 6 / math.sqrt(x.shape[0])
    across_draws = x @ x.T / x.shape[1]  # (draws, draws): bits of one word must be independent
    off = across_draws - torch.eye(x.shape[0], dtype=torch.float64)
    assert off.abs().max().item() < 6 / math.sqrt(x.shape[1])


# ---- LinearAccumulator: chunk invariance and the naive reference ----


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_chunked_equals_unchunked_bit_for_bit(dtype: torch.dtype) -> None:
    rows, p, d, draws = 10_001, 3, 2, 70
    features = _randn(rows, p, seed=1, dtype=dtype)

    def products(chunks: list[int]) -> torch.Tensor:
        acc = rademacher.LinearAccumulator(d, p, draws, seed=5, dtype=dtype)
        start = 0
        for size in chunks:
            acc.update(features[start : start + size])
            start += size
        assert start == rows and acc.rows == rows
        return acc.sign_products()

    reference = products([rows])
    for size in (1, 7, 4096, 10_000):
        assert torch.equal(products([size] * (rows // size) + [rows % size]), reference)
    assert torch.equal(products([5000, 0, 3, 4096, 902]), reference)
    assert torch.equal(reference, products([rows]))  # finish/sign_products leave state alone
    naive = ref_sign_products(features, d, draws, 5)
    torch.testing.assert_close(
        reference,
        naive,
        rtol=1e-5 if dtype == torch.float32 else 1e-12,
        atol=1e-3 if dtype == torch.float32 else 1e-9,
    )


@pytest.mark.parametrize("draws", [2, 8, 13, 64])
def test_fewer_draws_are_the_first_draws_of_more(draws: int) -> None:
    """Only the bytes of the draws asked for are unpacked (8 * ceil(draws / 8) signs per row and
    coordinate): the products are those of the first `draws` draws of a 72-draw accumulator."""
    features = _randn(5000, 6, seed=7)
    few = rademacher.LinearAccumulator(3, 6, draws, seed=9)
    many = rademacher.LinearAccumulator(3, 6, 72, seed=9)
    few.update(features), many.update(features)
    torch.testing.assert_close(
        few.sign_products(), many.sign_products()[:draws], rtol=1e-12, atol=1e-10
    )


def test_linear_is_b_times_frobenius_norm_per_draw() -> None:
    features = _randn(300, 4, seed=2)
    est = rademacher.linear(features, 3, 2.5, 100, seed=11, chunk_rows=64)
    per_draw = 2.5 * torch.linalg.matrix_norm(ref_sign_products(features, 3, 100, 11))
    assert est.value == pytest.approx(per_draw.mean().item(), rel=1e-12)
    assert est.std == pytest.approx(per_draw.std().item(), rel=1e-9)
    z95 = NormalDist().inv_cdf(0.975)  # 1.959964: the exact quantile, not the rounded 1.96
    assert est.ci == pytest.approx(z95 * est.std / 10, rel=1e-12)
    assert est.draws == 100


def test_float32_path_agrees_with_float64() -> None:
    features = _randn(20_000, 16, seed=3, dtype=torch.float32)
    fast = rademacher.linear(features, 8, 1.0, 64, seed=4)
    exact = rademacher.linear(features.double(), 8, 1.0, 64, seed=4)
    assert fast.value == pytest.approx(exact.value, rel=1e-6)


def test_spectral_is_nuclear_norm_and_dominates_frobenius() -> None:
    features = _randn(200, 5, seed=4)
    est = rademacher.spectral(features, 3, 1.5, 80, seed=2)
    products = ref_sign_products(features, 3, 80, 2)
    nuclear = 1.5 * torch.linalg.matrix_norm(products, ord="nuc")
    assert est.value == pytest.approx(nuclear.mean().item(), rel=1e-10)
    assert est.value >= rademacher.linear(features, 3, 1.5, 80, seed=2).value
    # d = 1: S^T Phi is a row vector, so nuclear and Frobenius norms coincide
    one = rademacher.spectral(features, 1, 1.5, 80, seed=2).value
    assert one == pytest.approx(rademacher.linear(features, 1, 1.5, 80, seed=2).value, rel=1e-12)


# ---- exact enumeration ----


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 2, 2), (4, 3, 2), (2, 5, 1)])
def test_exact_finite_matches_naive_loop(shape: tuple[int, int, int]) -> None:
    values = _randn(*shape, seed=sum(shape))
    assert rademacher.exact_finite(values) == pytest.approx(ref_exact_finite(values), rel=1e-12)


def test_exact_linear_matches_pattern_loop() -> None:
    features = _randn(3, 2, seed=6)
    d, B = 2, 0.7
    total = 0.0
    for eps in itertools.product((-1.0, 1.0), repeat=6):
        S = torch.tensor(eps, dtype=torch.float64).view(3, d)
        total += B * torch.linalg.matrix_norm(S.T @ features).item()
    assert rademacher.exact_linear(features, d, B) == pytest.approx(total / 64, rel=1e-12)


@pytest.mark.parametrize(("N", "d", "p"), [(5, 3, 4), (10, 2, 3), (20, 1, 6)])
def test_monte_carlo_within_its_ci_of_exact(N: int, d: int, p: int) -> None:
    features = _randn(N, p, seed=N)
    exact = rademacher.exact_linear(features, d, 1.3)
    est = rademacher.linear(features, d, 1.3, 4096, seed=N)
    assert abs(est.value - exact) <= est.ci
    values = _randn(6, N, d, seed=N + 1)
    est = rademacher.finite(values, 4096, seed=N)
    assert abs(est.value - rademacher.exact_finite(values)) <= est.ci


def test_jensen_and_second_moment_identity() -> None:
    """E ||S^T Phi||_F^2 = d sum_j ||phi_j||^2 exactly, hence E ||S^T Phi||_F <= its root."""
    features = _randn(5, 3, seed=8)
    d = 3
    second = sum(
        torch.linalg.matrix_norm(torch.tensor(eps, dtype=torch.float64).view(5, d).T @ features)
        .pow(2)
        .item()
        for eps in itertools.product((-1.0, 1.0), repeat=5 * d)
    ) / 2 ** (5 * d)
    target = d * features.pow(2).sum().item()
    assert second == pytest.approx(target, rel=1e-12)
    assert rademacher.exact_linear(features, d, 1.0) <= math.sqrt(target)


# ---- vector contraction ----


def _lipschitz_maps(L: float, centres: torch.Tensor) -> list:
    """Maps (K, m, d) -> (K, m), each coordinate map h_i L-Lipschitz in v_i."""
    return [
        lambda V: L * V[..., 0],
        lambda V: L * (V - centres).norm(dim=-1),
        lambda V: L * torch.sin(V.sum(dim=-1) / math.sqrt(V.shape[-1])),
        lambda V: L * (V - centres).abs().amax(dim=-1),
        lambda V: L * torch.relu(V[..., -1] - centres[..., 0]),
    ]


@settings(max_examples=50, deadline=None)
@given(
    K=st.integers(1, 6),
    m=st.integers(1, 5),
    d=st.integers(1, 4),
    L=st.floats(0.1, 10.0),
    which=st.integers(0, 4),
    seed=st.integers(0, 10_000),
)
def test_vector_contraction_holds(K: int, m: int, d: int, L: float, which: int, seed: int) -> None:
    d = min(d, 16 // m)
    V = _randn(K, m, d, seed=seed)
    centres = _randn(m, d, seed=seed + 1)
    sides = rademacher.vector_contraction(V, _lipschitz_maps(L, centres)[which], L)
    assert sides.lhs <= sides.rhs_sqrt3 + 1e-9
    assert sides.lhs <= sides.rhs_maurer + 1e-9  # Maurer's sharper constant is a theorem too
    assert sides.rhs_sqrt3 == pytest.approx(math.sqrt(3) / math.sqrt(2) * sides.rhs_maurer)
    assert sides.ratio <= math.sqrt(2) + 1e-9


def test_contraction_constant_cannot_drop_to_one_half() -> None:
    """h_i = identity on d = 1: both sides are the same sign-supremum, ratio 1 > 0.5."""
    V = _randn(5, 4, 1, seed=3)
    sides = rademacher.vector_contraction(V, lambda v: v[..., 0], 1.0)
    assert sides.ratio == pytest.approx(1.0, rel=1e-12)
    assert sides.lhs > 0.5 * sides.rhs_maurer / math.sqrt(2)
    assert sides.lhs == pytest.approx(rademacher.exact_finite(V), rel=1e-12)


def test_contraction_ratio_when_all_vectors_are_equal() -> None:
    V = torch.ones(3, 2, 2, dtype=torch.float64)
    sides = rademacher.vector_contraction(V, lambda v: v.sum(dim=-1), 2.0)
    assert sides.lhs == 0.0 and sides.rhs_sqrt3 == 0.0 and sides.ratio == 0.0


# ---- bad inputs ----


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: rademacher.signs(-1, 4, 0, 2, 2), "seed=-1"),
        (lambda: rademacher.signs(2**64, 4, 0, 2, 2), "seed="),
        (lambda: rademacher.signs(0, 0, 0, 2, 2), "draws=0"),
        (lambda: rademacher.signs(0, 4, -3, 2, 2), "row_start=-3"),
        (lambda: rademacher.signs(0, 4, 2**40, 1, 2), "row_start \\+ rows"),
        (lambda: rademacher.signs(0, 4, 0, 2, 0), "d=0"),
        (lambda: rademacher.linear(torch.ones(4), 2, 1.0, 8, 0), "features has shape"),
        (lambda: rademacher.linear([[1.0]], 2, 1.0, 8, 0), "features is list"),
        (lambda: rademacher.linear(torch.ones(4, 2), 2, 0.0, 8, 0), "B=0.0"),
        (lambda: rademacher.linear(torch.ones(4, 2), 2, 1.0, 1, 0), "draws=1"),
        (lambda: rademacher.linear(torch.ones(4, 2), 2, 1.0, 8, 0, chunk_rows=0), "chunk_rows=0"),
        (lambda: rademacher.linear(torch.full((4, 2), math.nan), 2, 1.0, 8, 0), "non-finite"),
        (lambda: rademacher.linear(torch.ones(4, 2, dtype=torch.int64), 2, 1.0, 8, 0), "dtype"),
        (lambda: rademacher.spectral(torch.ones(4, 2), 2, -1.0, 8, 0), "B=-1.0"),
        (lambda: rademacher.finite(torch.ones(4, 2), 8, 0), "values has shape"),
        (lambda: rademacher.exact_finite(torch.ones(2, 7, 3)), "N \\* d=21"),
        (lambda: rademacher.exact_linear(torch.ones(11, 2), 2, 1.0), "N \\* d=22"),
        (
            lambda: rademacher.vector_contraction(torch.ones(2, 7, 3), lambda v: v[..., 0], 1.0),
            "m \\* d=21",
        ),
        (
            lambda: rademacher.vector_contraction(torch.ones(2, 3, 2), lambda v: v, 1.0),
            "h\\(V\\) has shape",
        ),
        (
            lambda: rademacher.vector_contraction(torch.ones(2, 3, 2), lambda v: v[..., 0], 0.0),
            "L=0.0",
        ),
        (lambda: rademacher.LinearAccumulator(2, 3, 8, 0, dtype=torch.float16), "dtype="),
        (
            lambda: rademacher.LinearAccumulator(2, 3, 8, 0).update(torch.ones(5, 4)),
            "features has shape \\(5, 4\\): expected \\(rows, 3\\)",
        ),
        (lambda: rademacher.LinearAccumulator(2, 0, 8, 0), "p=0"),
    ],
)
def test_bad_inputs(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()
