"""Exact sign-suprema over every sign pattern, and the vector contraction
(docs/theory/statements.md S2)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from crl.kernels import _validate
from crl.kernels.rademacher._signs import _check_coords

MAX_EXACT_SIGNS = 20
_LOW_BITS = 14  # exhaustive enumeration tabulates 2^14 patterns of the low signs once


@dataclass(frozen=True)
class ContractionSides:
    """Both sides of the vector contraction inequality (docs/theory/statements.md S2), computed
    exactly.

    lhs = E_eps sup_v sum_i eps_i h_i(v_i); rhs_sqrt3 = sqrt(3) L E_eta sup_v sum_it eta_it v_it
    (the seed lemma); rhs_maurer = the same with sqrt(2) (Maurer 2016); ratio = lhs / (L E_eta ...).
    """

    lhs: float
    rhs_sqrt3: float
    rhs_maurer: float
    ratio: float


def _patterns(n: int, device: torch.device) -> torch.Tensor:
    """All sign patterns of {-1, +1}^n; pattern a has sign -1 where bit i of a is set.

    Shape: returns (2^n, n) float64.
    """
    codes = torch.arange(1 << n, device=device)[:, None] >> torch.arange(n, device=device)
    return (1 - 2 * (codes & 1)).to(torch.float64)


def _pattern_sums(atoms: torch.Tensor) -> Iterator[torch.Tensor]:
    """sum_i eps_i atoms[i] for every eps in {-1, +1}^n with eps_n = +1, in chunks.

    The other half are the negations. The sums over the low bits are tabulated once; each chunk
    adds the fixed contribution of its high bits. Shape: atoms (n, Q); yields (chunk, Q) float64.
    """
    n = atoms.shape[0]
    low = min(n - 1, _LOW_BITS)
    table = _patterns(low, atoms.device) @ atoms[:low]  # (2^low, Q)
    for high in range(1 << (n - 1 - low)):
        high_signs = [-1.0 if (high >> i) & 1 else 1.0 for i in range(n - 1 - low)] + [1.0]
        offset = torch.tensor(high_signs, dtype=torch.float64, device=atoms.device) @ atoms[low:]
        yield table + offset


def _check_exact(name: str, n: int) -> None:
    if n > MAX_EXACT_SIGNS:
        raise ValueError(f"{name}={n!r}: expected <= {MAX_EXACT_SIGNS} for exhaustive enumeration")


def exact_finite(values: torch.Tensor) -> float:
    """Exact R_S of a finite class by enumerating all 2^(N d) sign patterns.

    E_eps max_k sum_{j,t} eps_jt values[k, j, t]. Patterns are paired with their negations:
    max_k s_k + max_k (-s_k) = max_k s_k - min_k s_k >= 0 per pair, so the result is never
    negative and is exactly 0 when all K functions agree (e.g. K = 1).
    Shape: values (K, N, d), N * d <= 20.
    """
    values = _validate.float_tensor("values", values, 3, "(K, N, d)")
    n = values.shape[1] * values.shape[2]
    _check_exact("N * d", n)
    atoms = values.to(torch.float64).reshape(values.shape[0], n).T  # (N d, K)
    total = sum(float((s.amax(dim=1) - s.amin(dim=1)).sum()) for s in _pattern_sums(atoms))
    return total / (1 << n)


def exact_linear(features: torch.Tensor, d: int, B: float) -> float:
    """Exact R_S of {x -> W phi(x): ||W||_F <= B}: mean of B ||S^T Phi||_F over all 2^(N d) S.

    S^T Phi = sum_{j,t} S_jt e_t phi_j^T; S and -S give the same norm, so half the patterns do.
    Shape: features (N, p), N * d <= 20.
    """
    features = _validate.float_tensor("features", features, 2, "(N, p)")
    _check_coords(d)
    B = _validate.positive("B", B)
    n = features.shape[0] * d
    _check_exact("N * d", n)
    eye = torch.eye(d, dtype=torch.float64, device=features.device)
    phi = features.to(torch.float64)
    atoms = torch.einsum("tu,jq->jtuq", eye, phi).reshape(n, -1)  # (N d, d p)
    total = sum(float(s.norm(dim=1).sum()) for s in _pattern_sums(atoms))
    return B * total / (1 << (n - 1))


def vector_contraction(
    V: torch.Tensor, h: Callable[[torch.Tensor], torch.Tensor], L: float
) -> ContractionSides:
    """Both sides of the vector contraction inequality, exactly (docs/theory/statements.md S2).

    E_eps sup_v sum_i eps_i h_i(v_i) <= sqrt(3) L E_eta sup_v sum_{i,t} eta_it v_it for
    L-Lipschitz h_i; Maurer (2016) proves the constant sqrt(2). E_eta sup ... = 0 only when all v
    are equal; then lhs = 0 too and the ratio is reported as 0 (inf if lhs > 0, i.e. h is not a
    function of v).
    Shape: V (K, m, d), the finite set of v = (v_1..v_m); h maps (K, m, d) -> (K, m), applying h_i
    to v_i; m * d <= 20.
    """
    V = _validate.float_tensor("V", V, 3, "(K, m, d)")
    L = _validate.positive("L", L)
    classes, m, coords = V.shape
    _check_exact("m * d", m * coords)
    hv = _validate.tensor("h(V)", h(V))
    _validate.shape("h(V)", hv, f"({classes}, {m})", hv.shape == (classes, m))
    lhs = exact_finite(hv.unsqueeze(-1))
    sup = L * exact_finite(V)
    if sup > 0:
        ratio = lhs / sup
    else:
        ratio = 0.0 if lhs == 0 else math.inf
    return ContractionSides(lhs, math.sqrt(3) * sup, math.sqrt(2) * sup, ratio)
