"""crl.kernels.dense.bounds against docs/theory/dense-bounds.md: its formulas written out here
(naive loops, explicit matrices, float64), the numbers its sections 3, 5, 6, 7.2-7.5 and 8 quote,
gradient checks of the Lipschitz constants, and the validity rule of the MI bound."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from crl.kernels import certified
from crl.kernels.dense import bounds as dense_bounds
from crl.kernels.dense import info_nce as dense
from crl.kernels.dense import mi as dense_mi
from crl.kernels.dense import queue as dense_queue
from crl.kernels.loss_constants import loss_constants

F64 = torch.float64
DELTA = 0.05


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _unit(*shape: int, seed: int) -> torch.Tensor:
    return F.normalize(torch.randn(*shape, generator=_gen(seed), dtype=F64), dim=-1)


def _half_unit(text: str) -> float:
    """Half a unit of the last printed digit of `text` (e.g. 5.95e+04 -> 50)."""
    mant, _, exp = text.partition("e")
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    return 0.5 * 10.0 ** (int(exp or 0) - decimals)


def _quoted(got: float, text: str) -> None:
    """`got` rounds to `text` as printed."""
    assert abs(got - float(text)) <= _half_unit(text) + 1e-12, (got, text)


# ---- the document's formulas, written out ----


def _omega(N: int, R: float, T: float) -> float:
    return (1 / T) ** 2 / (1 + N * math.exp(-2 * R * R / T))


def _range(N: int, R: float, T: float) -> float:
    a = 2 * R * R / T
    return math.log((1 + N * math.exp(a)) / (1 + N * math.exp(-a)))


def _routes_E(n, K, m, p, d, R, T, regime):
    """Thm D5 with nu = 1 and Lambda_K for a full one-to-one correspondence."""
    L, N = 1 / T, (K - 1 + m if regime == "own" else m)
    om, KN = _omega(N, R, T), (K if regime == "own" else 0)
    chi = 1 if regime == "own" else 0
    lam = R * math.sqrt(5 * L**2 / K + om + chi * min(2 * L**2 / K, 2 * L * math.sqrt(om / K)))
    cv = math.sqrt(3)
    return {
        "V": 2 * cv * lam * R * math.sqrt(d * (2 * K + m) / n),
        "Vw": 2 * cv * R**2 * math.sqrt(d / n) * (2 * L + L + math.sqrt(om * (KN + m))),
        "B2": 4 * R**2 * math.sqrt(math.log(2 * p) / n) * (L + math.sqrt(om * N)),
        "lam_over_RL": lam / (R * L),
        "B": _range(N, R, T),
    }


def _sym2(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    h = (torch.outer(x, y) + torch.outer(y, x)) / 2
    return h @ h


def _naive_image(phi1, phi2, xi, pairs, regime, R, T):
    """Every quantity of D3, Lemma D1, Lemma D2 and Thm D4 for one image, by definition."""
    L, m, K2 = 1 / T, xi.shape[0], phi2.shape[0]
    rows = [tuple(r) for r in pairs.tolist()]
    A = sorted({a for a, _ in rows})
    P = {a: [b for aa, b in rows if aa == a] for a in A}
    w = {(a, b): 1 / (len(A) * len(P[a])) for a in A for b in P[a]}
    wa = {a: sum(w[a, b] for b in P[a]) for a in A}
    alpha = [sum(v for (_, b), v in w.items() if b == key) for key in range(K2)]
    sigma, amax = sum(x * x for x in alpha), max(alpha)
    nin = {a: [u for u in range(K2) if u not in P[a]] if regime == "own" else [] for a in A}
    Na = {a: len(nin[a]) + m for a in A}
    om_min = _omega(min(Na.values()), R, T)
    chi = any(b in nin[a2] for a in A for b in P[a] for a2 in A)
    sw2, swa2 = sum(v * v for v in w.values()), sum(v * v for v in wa.values())
    cross = min(2 * L * L * amax, 2 * L * math.sqrt(sigma * om_min))
    lam2 = R * R * (4 * L * L * swa2 + L * L * sigma + om_min + chi * cross)
    neg_keys = sorted({u for a in A for u in nin[a]})
    keys = sorted({b for a in A for b in P[a]} | set(neg_keys))
    sq = lambda v: float(v @ v)  # noqa: E731
    S_Q = sum(sq(phi1[a]) for a in A)
    S_xi = sum(sq(x) for x in xi)
    S2 = S_Q + sum(sq(phi2[b]) for b in keys) + S_xi
    S_P = sum(sq(phi2[b]) for a in A for b in P[a])
    S_N = sum(sq(phi2[u]) for u in neg_keys) + S_xi
    cQ2, cP2, cN2 = 4 * R * R * L * L * swa2, R * R * L * L * sw2, R * R * om_min
    cplus2 = L * L * sw2
    cminus2 = sum(wa[a] ** 2 * _omega(Na[a], R, T) for a in A)
    p = phi1.shape[1]
    Mp, Mm = torch.zeros(p, p, dtype=F64), torch.zeros(p, p, dtype=F64)
    for a in A:
        for b in P[a]:
            Mp += cplus2 * _sym2(phi1[a], phi2[b])
        for u in [phi2[k] for k in nin[a]] + list(xi):
            Mm += cminus2 * _sym2(phi1[a], u)
    return {
        "lam_S2": lam2 * S2,
        "V_Q": cQ2 * S_Q,
        "V_P": cP2 * S_P,
        "V_N": cN2 * S_N,
        "plus": Mp,
        "minus": Mm,
        "N": list(Na.values()),
        "nu": len(rows) * sw2,
        "chi": int(chi),
        "sigma": sigma,
        "alpha_max": amax,
        "lam2": lam2,
    }


def _random_pairs(K1: int, K2: int, seed: int, max_pos: int = 3) -> torch.Tensor:
    """A partial correspondence with 1..max_pos positives per anchor (some anchors without)."""
    g = _gen(seed)
    rows = []
    for a in range(K1):
        if torch.rand(1, generator=g).item() < 0.3 and a > 0:
            continue
        k = int(torch.randint(1, max_pos + 1, (1,), generator=g))
        rows += [(a, int(b)) for b in torch.randperm(K2, generator=g)[:k]]
    return torch.tensor(rows, dtype=torch.int64)


@pytest.mark.parametrize("regime", ["own", "ext"])
@pytest.mark.parametrize("T", [0.2, 1.0])
def test_accumulator_matches_the_formulas_by_definition(regime: str, T: float) -> None:
    R, p, K1, K2, m, n = 0.8, 5, 6, 7, 4, 5
    acc = dense_bounds.DenseStatsAccumulator(p, R, T, regime)
    ref = {k: 0.0 for k in ("lam_S2", "V_Q", "V_P", "V_N")}
    plus, minus, Ns = torch.zeros(p, p, dtype=F64), torch.zeros(p, p, dtype=F64), []
    for i in range(n):
        scale = 0.5 + 0.5 * torch.rand(1, generator=_gen(100 + i), dtype=F64)  # norms <= 1
        phi1, phi2 = scale * _unit(K1, p, seed=3 * i), _unit(K2, p, seed=3 * i + 1)
        xi = 0.9 * _unit(m, p, seed=3 * i + 2)
        pairs = _random_pairs(K1, K2, seed=i)
        acc.update(phi1, phi2, pairs, xi)
        r = _naive_image(phi1, phi2, xi, pairs, regime, R, T)
        for k in ref:
            ref[k] += r[k]
        plus, minus, Ns = plus + r["plus"], minus + r["minus"], Ns + r["N"]
        cw = dense_bounds.correspondence_weights(pairs, K2, m, regime)
        assert cw.chi == r["chi"] and cw.nu == pytest.approx(r["nu"], rel=1e-12)
        assert cw.sigma_alpha == pytest.approx(r["sigma"], rel=1e-12)
        assert cw.alpha_max == pytest.approx(r["alpha_max"], rel=1e-12)
        assert dense_bounds.lipschitz_dense(cw, R, T) ** 2 == pytest.approx(r["lam2"], rel=1e-12)
    s = acc.finish()
    for k in ref:
        assert getattr(s, k) == pytest.approx(ref[k], rel=1e-12), k
    assert s.v_plus == pytest.approx(float(torch.linalg.eigvalsh(plus)[-1]), rel=1e-10)
    assert s.v_minus == pytest.approx(float(torch.linalg.eigvalsh(minus)[-1]), rel=1e-10)
    assert (s.n_min, s.n_max) == (min(Ns), max(Ns))
    d, L = 3, 1 / T
    routes = dense_bounds.dense_routes_S(s, d)
    lg = math.sqrt(2 * math.log(2 * p))
    want = {
        "V": 2 * math.sqrt(3) * R * math.sqrt(d * ref["lam_S2"]) / n,
        "Vw": 2
        * math.sqrt(3)
        * R
        * math.sqrt(d)
        / n
        * (math.sqrt(ref["V_Q"]) + math.sqrt(ref["V_P"]) + math.sqrt(ref["V_N"])),
        "B2": 2 * math.sqrt(2) * R * R * lg / n * (math.sqrt(s.v_plus) + math.sqrt(s.v_minus)),
    }
    for k in want:
        assert routes[k] == pytest.approx(want[k], rel=1e-12)
    support = (min(Ns), max(Ns))
    B = math.log(1 + max(Ns) * math.exp(2 * R * R * L)) - math.log(
        1 + min(Ns) * math.exp(-2 * R * R * L)
    )
    conc = 3 * B * math.sqrt(math.log(4 / DELTA) / (2 * n))
    got = dense_bounds.gamma_dense_S(s, d, DELTA, support)
    assert got.value == pytest.approx(min(want.values()) + conc, rel=1e-12)
    assert got.concentration_term == pytest.approx(conc, rel=1e-12)
    assert dense_bounds.gamma_dense_V(s, d, DELTA, support).value == pytest.approx(
        want["V"] + conc, rel=1e-12
    )
    outer = dense_queue.queue_outer_S(s, d, DELTA, support)
    assert outer.concentration_term == pytest.approx(
        conc * math.sqrt(math.log(8 / DELTA) / math.log(4 / DELTA))
    )
    with pytest.raises(ValueError, match="^negatives_range"):
        dense_bounds.gamma_dense_S(s, d, DELTA, (min(Ns) + 1, max(Ns)))


def _h_embeddings(q, k, ext, pairs, regime, T):
    """h of (D4) as a function of the stacked embeddings, with loops over the pairs."""
    rows = [tuple(r) for r in pairs.tolist()]
    A = sorted({a for a, _ in rows})
    total = 0
    for a in A:
        P = [b for aa, b in rows if aa == a]
        negs = ([k[u] for u in range(k.shape[0]) if u not in P] if regime == "own" else []) + list(
            ext
        )
        for b in P:
            diff = torch.stack([q[a] @ (c - k[b]) for c in negs]) / T
            total = total + torch.logsumexp(torch.cat([diff.new_zeros(1), diff]), 0) / (
                len(A) * len(P)
            )
    return total


@pytest.mark.parametrize("regime", ["own", "ext"])
@pytest.mark.parametrize("T", [0.2, 1.0])
def test_lemma_d1_gradient_norm_never_exceeds_lambda(regime: str, T: float) -> None:
    R, dim, K, m = 1.0, 3, 4, 3
    for seed in range(4):
        pairs = _random_pairs(K, K, seed=seed, max_pos=2)
        lam = dense_bounds.lipschitz_dense(
            dense_bounds.correspondence_weights(pairs, K, m, regime), R, T
        )
        starts = [
            (
                _unit(K, dim, seed=10 * seed + j),
                _unit(K, dim, seed=10 * seed + j + 1),
                _unit(m, dim, seed=10 * seed + j + 2),
            )
            for j in range(3)
        ]
        e = torch.zeros(dim, dtype=F64)
        e[0] = R
        starts.append(
            (e.expand(K, dim).clone(), -e.expand(K, dim).clone(), torch.stack([e] + [-e] * (m - 1)))
        )  # one hard external for all queries
        for q, k, ext in starts:
            u = [t.clone().requires_grad_() for t in (q, k, ext)]
            grads = torch.autograd.grad(_h_embeddings(*u, pairs, regime, T), u)
            norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
            assert norm <= lam * (1 + 1e-9)


# ---- the numbers docs/theory/dense-bounds.md quotes ----

# section 7.2: T, regime, m, B, Lambda/(RL), then V^E / Vw^E / B2^E -> Gamma^E (Gamma^E / B) at
# n = 64, 256, 1024
TABLE_72 = """
0.2 own 16 14.4 1.052 109/103/50.3/52.8/3.67 54.6/51.7/25.2/26.4/1.84 27.3/25.8/12.6/13.2/0.92
0.2 own 256 15.8 1.046 178/180/95.5/98.2/6.23 88.8/89.9/47.8/49.1/3.12 44.4/44.9/23.9/24.5/1.56
0.2 own 4096 18.2 0.975 549/538/307/310/17.06 274/269/153/155/8.53 137/135/76.7/77.4/4.26
0.2 ext 16 12.8 1.038 108/60.6/25.5/27.7/2.17 53.9/30.3/12.7/13.8/1.08 27/15.2/6.37/6.91/0.54
0.2 ext 256 15.5 1.033 175/164/86.2/88.8/5.72 87.6/81.9/43.1/44.4/2.86 43.8/40.9/21.6/22.2/1.43
0.2 ext 4096 18.1 0.960 540/535/305/308/16.96 270/267/152/154/8.48 135/134/76.2/77/4.24
1.0 own 16 3.91 0.441 9.18/9.73/3.67/4.33/1.11 4.59/4.86/1.84/2.17/0.55 2.29/2.43/0.918/1.08/0.28
1.0 own 256 3.98 0.363 12.3/9.86/3.76/4.44/1.12 6.17/4.93/1.88/2.22/0.56 3.08/2.46/0.94/1.11/0.28
1.0 own 4096 4 0.301 33.9/9.9/3.79/4.47/1.12 16.9/4.95/1.89/2.23/0.56 8.46/2.48/0.947/1.12/0.28
1.0 ext 16 3.63 0.628 13/9.09/3.31/3.93/1.08 6.52/4.55/1.66/1.96/0.54 3.26/2.27/0.828/0.982/0.27
1.0 ext 256 3.97 0.326 11.1/9.84/3.75/4.43/1.11 5.53/4.92/1.88/2.21/0.56 2.76/2.46/0.938/1.11/0.28
1.0 ext 4096 4 0.283 31.8/9.9/3.79/4.47/1.12 15.9/4.95/1.89/2.23/0.56 7.96/2.48/0.947/1.12/0.28
"""
K, P_DIM, D_HEAD = 64, 32, 16


@pytest.mark.parametrize("line", TABLE_72.strip().splitlines())
def test_table_7_2_data_free_bounds(line: str) -> None:
    T, regime, m, B, lam, *cells = line.split()
    T, m = float(T), int(m)
    for n, cell in zip((64, 256, 1024), cells, strict=True):
        v, vw, b2, total, ratio = cell.split("/")
        ref = _routes_E(n, K, m, P_DIM, D_HEAD, 1.0, T, regime)
        for got, text in ((ref["V"], v), (ref["Vw"], vw), (ref["B2"], b2)):
            _quoted(got, text)
        _quoted(ref["B"], B)
        _quoted(ref["lam_over_RL"], lam)
        cert = dense_bounds.gamma_dense_E(n, K, m, P_DIM, D_HEAD, 1.0, T, DELTA, regime, full=True)
        conc = ref["B"] * math.sqrt(math.log(2 / DELTA) / (2 * n))
        assert cert.value == pytest.approx(min(ref["V"], ref["Vw"], ref["B2"]) + conc, rel=1e-12)
        routes = dense_bounds.dense_routes_E(n, K, m, P_DIM, D_HEAD, 1.0, T, regime, full=True)
        assert routes == pytest.approx({k: ref[k] for k in ("V", "Vw", "B2")}, rel=1e-12)
        _quoted(cert.value, total)
        _quoted(cert.value / ref["B"], ratio)


def test_b2e_is_the_single_position_bound_with_m_replaced_by_n() -> None:
    for T, N in ((0.2, 79), (1.0, 4159)):
        single = certified.gamma_e_routes(256, N, P_DIM, loss_constants("info_nce", N, 1.0, T), 16)
        dense_b2 = dense_bounds.dense_routes_E(256, K, N - K + 1, P_DIM, 16, 1.0, T, "own")["B2"]
        assert dense_b2 == pytest.approx(single["B2"], rel=1e-14)


def test_section_3_lipschitz_numbers() -> None:
    """Lambda/(RL) = 1.052 (own, T=0.2, m=16), 1.038 (ext), 0.44 / 0.63 (own / ext, T=1) at
    K=64 one-to-one; sqrt(5 + omega/L^2) ~ 2.45 for one position at T=0.2 (Lemma D1(c))."""
    full = torch.stack([torch.arange(K), torch.arange(K)], 1)
    for regime, T, text in (
        ("own", 0.2, "1.052"),
        ("ext", 0.2, "1.038"),
        ("own", 1.0, "0.44"),
        ("ext", 1.0, "0.63"),
    ):
        cw = dense_bounds.correspondence_weights(full, K, 16, regime)
        _quoted(dense_bounds.lipschitz_dense(cw, 1.0, T) * T, text)
    one = dense_bounds.correspondence_weights(torch.tensor([[0, 0]]), 1, 16, "ext")
    lam = dense_bounds.lipschitz_dense(one, 1.0, 0.2)
    assert lam == pytest.approx(math.sqrt(5 * 25 + _omega(16, 1.0, 0.2)), rel=1e-12)
    _quoted(lam * 0.2, "2.45")


# section 7.3, the Vw column and the totals: Vw is K-free and equal to Vw^E for unit-norm
# features whenever |A| >= 2 (own) or the correspondence is full (ext); V and B2 depend on the
# document's synthetic features, which are not specified enough to regenerate.
TABLE_73 = """
own 0.2 16 14.4 104/103/31.7/39.7/2.76 52.9/51.7/15.7/19.7/1.37 26.4/25.8/7.81/9.81/0.68
own 0.2 256 15.8 188/180/56.2/64.9/4.12 96.1/89.9/27.9/32.3/2.05 48/44.9/13.9/16.1/1.02
own 0.2 4096 18.2 619/538/176/186/10.22 318/269/87.3/92.3/5.08 159/135/43.5/46/2.53
own 1.0 16 3.91 11.7/9.73/2.34/4.52/1.15 6.15/4.86/1.16/2.24/0.57 3.07/2.43/0.578/1.12/0.29
own 1.0 256 3.98 19.1/9.86/2.29/4.5/1.13 10.3/4.93/1.13/2.24/0.56 5.1/2.46/0.565/1.12/0.28
own 1.0 4096 4 60.4/9.9/2.27/4.49/1.12 32.9/4.95/1.13/2.24/0.56 16.3/2.48/0.561/1.12/0.28
ext 0.2 16 12.8 96.9/60.6/14.9/22/1.72 48.7/30.3/7.45/11/0.86 24.3/15.2/3.72/5.49/0.43
ext 0.2 256 15.5 172/164/49.3/57.9/3.73 85.9/81.9/24.7/29/1.87 42.9/40.9/12.3/14.5/0.93
ext 0.2 4096 18.1 555/535/173/183/10.09 277/267/86.6/91.7/5.05 138/134/43.2/45.7/2.52
ext 1.0 16 3.63 12.2/9.09/1.97/3.98/1.10 6.1/4.55/0.985/1.99/0.55 3.05/2.27/0.492/0.995/0.27
ext 1.0 256 3.97 13.1/9.84/2.22/4.42/1.11 6.44/4.92/1.11/2.21/0.56 3.25/2.46/0.554/1.11/0.28
ext 1.0 4096 4 41.7/9.9/2.24/4.46/1.11 20.4/4.95/1.12/2.23/0.56 10.3/2.48/0.559/1.11/0.28
queue 0.2 16 12.8 96.9/60.6/15/22.6/1.77 48.7/30.3/7.54/11.4/0.89 24.3/15.2/3.76/5.66/0.44
queue 0.2 256 15.5 172/164/49.3/58.6/3.77 85.9/81.9/24.7/29.3/1.89 42.9/40.9/12.3/14.6/0.94
queue 0.2 4096 18.1 555/535/173/184/10.12 277/267/86.5/92/5.07 138/134/43.2/45.9/2.53
queue 1.0 16 3.63 12.2/9.09/1.98/4.15/1.14 6.1/4.55/0.995/2.08/0.57 3.05/2.27/0.496/1.04/0.29
queue 1.0 256 3.97 13.1/9.84/2.22/4.59/1.16 6.44/4.92/1.11/2.3/0.58 3.25/2.46/0.555/1.15/0.29
queue 1.0 4096 4 41.7/9.9/2.24/4.62/1.16 20.4/4.95/1.12/2.31/0.58 10.3/2.48/0.559/1.16/0.29
"""


def _geometric_pairs(seed: int) -> torch.Tensor:
    """True cell matches of two random 6x6-cell crops of a 10x10 grid (|A| >= 2), K = 64 ids."""
    g = _gen(seed)
    while True:
        o1, o2 = torch.randint(0, 3, (2, 2), generator=g).tolist()
        rows = [
            (r * 8 + c, (r + o1[0] - o2[0]) * 8 + (c + o1[1] - o2[1]))
            for r in range(8)
            for c in range(8)
            if 0 <= r + o1[0] - o2[0] < 8 and 0 <= c + o1[1] - o2[1] < 8
        ]
        if len(rows) >= 2:
            return torch.tensor(rows, dtype=torch.int64)


@pytest.mark.parametrize("line", TABLE_73.strip().splitlines())
def test_table_7_3_vw_column_and_totals(line: str) -> None:
    variant, T, m, B, *cells = line.split()
    T, m = float(T), int(m)
    regime = "own" if variant == "own" else "ext"
    N = dense_bounds.negatives_count(K, m, regime)
    _quoted(_range(N, 1.0, T), B)
    acc = dense_bounds.DenseStatsAccumulator(P_DIM, 1.0, T, regime)
    queue = _unit(m, P_DIM, seed=m)  # unit norms: Vw needs nothing else
    images = 4
    for i in range(images):
        phi1, phi2 = _unit(K, P_DIM, seed=2 * i), _unit(K, P_DIM, seed=2 * i + 1)
        pairs = _geometric_pairs(i) if regime == "own" else dense.argmax_correspondence(phi1, phi2)
        acc.update(phi1, phi2, pairs, queue)
    stats = acc.finish()
    level = DELTA / 2 if variant == "queue" else DELTA
    for n, cell in zip((64, 256, 1024), cells, strict=True):
        v, vw, b2, total, ratio = cell.split("/")
        # per-image contributions to V_Q, V_P, V_N are image-independent here: scale to n images
        _quoted(dense_bounds.dense_routes_S(stats, D_HEAD)["Vw"] * math.sqrt(images / n), vw)
        conc = 3 * _range(N, 1.0, T) * math.sqrt(math.log(4 / level) / (2 * n))
        best = min((v, vw, b2), key=float)  # Gamma^S = quoted best route + S-form term
        got = float(best) + conc
        assert abs(got - float(total)) <= _half_unit(best) + _half_unit(total) + 1e-12
        err = _half_unit(best) / _range(N, 1.0, T)
        assert abs(got / _range(N, 1.0, T) - float(ratio)) <= _half_unit(ratio) + err + 1e-12


# section 7.4: T, m, Lip_mu (ext), Lip_mu (own, N_in = 63), Delta_m, bias_m, inner ext, inner own,
# B (ext)
TABLE_74 = """
0.2 16 140 29.7 426 10 5.95e+04 1.27e+04 12.8
0.2 256 148 119 106 10 1.58e+04 1.27e+04 15.5
0.2 4096 148 146 26.6 2.65 3.95e+03 3.89e+03 18.1
1.0 16 2.56 0.544 2.23 0.0923 5.79 1.30 3.63
1.0 256 2.71 2.17 0.557 0.00577 1.51 1.22 3.97
1.0 4096 2.72 2.68 0.139 0.00036 0.379 0.373 4.00
"""


@pytest.mark.parametrize("line", TABLE_74.strip().splitlines())
def test_table_7_4_inner_error(line: str) -> None:
    T, m, lip_ext, lip_own, dm, bias, inner_ext, inner_own, B = line.split()
    T, m = float(T), int(m)
    e = math.exp(1 / T)
    d2 = DELTA / 2
    want_dm = 2 * e / (T * math.sqrt(m)) + (e - 1 / e) * math.sqrt(math.log(2 / d2) / (2 * m))
    want_bias = min(2 / T, (e - 1) ** 2 / (2 * m))
    ext = dense_queue.queue_inner(m, 1.0, T, DELTA)
    own = dense_queue.queue_inner(m, 1.0, T, DELTA, n_in_min=63)
    assert ext.delta2 == d2 and ext.delta_m == pytest.approx(want_dm, rel=1e-12)
    assert ext.bias == pytest.approx(want_bias, rel=1e-12)
    assert ext.lip_mu == pytest.approx(m * e / (m + 1), rel=1e-12)
    assert own.lip_mu == pytest.approx(m * e / (m + 1 + 63), rel=1e-12)
    for got, text in (
        (ext.lip_mu, lip_ext),
        (own.lip_mu, lip_own),
        (ext.delta_m, dm),
        (ext.bias, bias),
        (ext.value, inner_ext),
        (own.value, inner_own),
        (_range(m, 1.0, T), B),
    ):
        _quoted(got, text)
    sscrl = certified.sscrl_inner(loss_constants("info_nce", m, 1.0, T), d2)
    assert ext.value == pytest.approx(sscrl, rel=1e-12)  # docs/theory/bounds.md Thm 4.2, m -> N


def test_section_7_4_totals_add_outer_and_inner() -> None:
    """1.53 (0.38), 2.69 (0.67), 2.66 (0.67), 3.81 (0.96): Table B's queue Gamma^S + inner."""
    for outer, m, total, ratio in (
        (1.16, 4096, 1.53, 0.38),
        (2.31, 4096, 2.69, 0.67),
        (1.15, 256, 2.66, 0.67),
        (2.3, 256, 3.81, 0.96),
    ):
        inner = dense_queue.queue_inner(m, 1.0, 1.0, DELTA)
        out = dense_bounds.Certificate(outer, 0.0, 0.0, "quoted")
        got = dense_queue.queue_bound(out, inner).value
        assert abs(got - total) <= 0.005 + 0.005 + 1e-12  # the quoted outer is rounded too
        assert abs(total / _range(m, 1.0, 1.0) - ratio) <= 0.005 + 1e-12


def test_prop_d8_lower_bound_and_exact_binomial_numbers() -> None:
    """4.62 / 2.82 / 1.17 at T = 0.2; the exact L_m - L_Y on the event H = 0 is 4.83 / 3.04 /
    1.37 (T = 0.2) and 0.29 / 0.024 / 0.002 (T = 1), for m = 16, 256, 4096."""
    for T, lows, exacts in (
        (0.2, ("4.62", "2.82", "1.17"), ("4.83", "3.04", "1.37")),
        (1.0, (None, None, None), ("0.29", "0.024", "0.002")),
    ):
        for m, low, exact in zip((16, 256, 4096), lows, exacts, strict=True):
            bound = dense_queue.queue_inner_lower(m, 1.0, T)
            want = (1 - (1 - 1 / m) ** m) * math.log(1 + (math.exp(2 / T) - 1) / (m + 1))
            assert bound == pytest.approx(want, rel=1e-12)
            if low:
                _quoted(bound, low)
            h = torch.arange(m + 1, dtype=F64)
            logpmf = (
                torch.lgamma(torch.tensor(m + 1.0, dtype=F64))
                - torch.lgamma(h + 1)
                - torch.lgamma(m - h + 1)
                + h * math.log(1 / m)
                + (m - h) * math.log1p(-1 / m)
            )
            loss = torch.log(1 + h * math.exp(2 / T) + m - h)
            gap = float((logpmf.exp() * loss).sum()) - math.log(1 + m)
            _quoted(gap, exact)
            assert gap >= bound


# section 7.5: T, m, log(1+m), ceiling, B_ext, Hoeffding margins at n_test = 64, 256, 1024
TABLE_75 = """
0.2 16 2.833 2.832 12.8 1.954 0.977 0.488
0.2 256 5.549 5.538 15.5 2.376 1.188 0.594
0.2 4096 8.318 8.147 18.1 2.776 1.388 0.694
1.0 16 2.833 1.681 3.63 0.555 0.278 0.139
1.0 256 5.549 1.975 3.97 0.608 0.304 0.152
1.0 4096 8.318 1.998 4.00 0.612 0.306 0.153
"""


@pytest.mark.parametrize("line", TABLE_75.strip().splitlines())
def test_table_7_5_mi_ceilings_and_margins(line: str) -> None:
    T, m, log1m, ceiling, B, *margins = line.split()
    T, m = float(T), int(m)
    lo = math.log(1 + m * math.exp(-2 / T))
    for n, text in zip((64, 256, 1024), margins, strict=True):
        losses = torch.full((n,), math.log1p(m), dtype=F64)  # y = 0 everywhere
        got = dense_mi.mi_lcb(losses, m, 1.0, T, DELTA)
        assert got.margin == pytest.approx(_range(m, 1.0, T) * math.sqrt(math.log(20) / (2 * n)))
        _quoted(got.margin, text)
        assert got.ceiling == pytest.approx(math.log1p(m) - lo, rel=1e-12)
    _quoted(math.log1p(m), log1m)
    _quoted(got.ceiling, ceiling)
    _quoted(_range(m, 1.0, T), B)
    assert got.ceiling <= min(math.log1p(m), 2 / T + math.log1p(1 / m))


def test_section_7_5_bernstein_range_terms() -> None:
    """7 B_ext ln(2/delta) / (3 (n_test - 1)) ~ 8.6 B_ext / n_test: 0.13 at T = 0.2, m = 256,
    n_test = 1024 (the quoted 0.034 at T = 1 is 0.0334: see the report)."""
    assert 7 * math.log(2 / DELTA) / 3 == pytest.approx(8.6, abs=0.01)
    for T, text in ((0.2, "0.13"), (1.0, "0.033")):
        term = 7 * _range(256, 1.0, T) * math.log(2 / DELTA) / (3 * 1023)
        _quoted(term, text)
        losses = torch.full((1024,), math.log1p(256), dtype=F64)  # zero variance
        got = dense_mi.mi_lcb(losses, 256, 1.0, T, DELTA, method="bernstein")
        assert got.margin == pytest.approx(term, rel=1e-12)


def test_section_8_extrapolation_to_densecl_scale() -> None:
    """B2^E ~ 7500/sqrt(n) (p = 2048) and 5300/sqrt(n) (p = 32) at m = 65536, T = 0.2; range
    19.7; the complexity term drops below it for n >~ 1.4e5 and is 6.6 at n = 1.28e6."""

    def b2(n: int, p: int) -> float:
        return dense_bounds.dense_routes_E(n, 49, 65536, p, 128, 1.0, 0.2, "ext")["B2"]

    assert b2(1, 2048) == pytest.approx(7500, rel=0.01)
    assert b2(1, 32) == pytest.approx(5300, rel=0.01)
    B = _range(65536, 1.0, 0.2)
    _quoted(B, "19.7")
    assert (b2(1, 2048) / B) ** 2 == pytest.approx(1.4e5, rel=0.04)
    _quoted(b2(1_280_000, 2048), "6.6")
    for m in (256, 4096, 65536):  # "2.0 nats at R = T = 1 for every m >= 256"
        ceiling = dense_mi.mi_lcb(torch.full((4,), math.log1p(m), dtype=F64), m, 1.0, 1.0, DELTA)
        _quoted(ceiling.ceiling, "2.0")


# ---- the MI bound's validity rule ----


def _case(n: int, m: int, T: float, seed: int, dependent: bool, dim: int = 64):
    """Unit vectors in R^dim. Anchor u; positive v independent of u (I = 0) or u plus noise;
    m external negatives independent, with v's law (uniform on the sphere); 8 in-image negatives
    equal to -u (anticorrelated with the anchor). Returns the per-image losses with the external
    negatives only and with all negatives."""
    g = _gen(seed)

    def sphere(*shape: int) -> torch.Tensor:
        return F.normalize(torch.randn(*shape, dim, generator=g, dtype=F64), dim=-1)

    u = sphere(n)
    v = F.normalize(u + 0.5 * sphere(n), dim=-1) if dependent else sphere(n)
    s_pos, s_ext = (u * v).sum(1), torch.einsum("nd,nmd->nm", u, sphere(n, m))
    s_in = torch.full((n, 8), -1.0, dtype=F64)

    def loss(neg: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(torch.cat([s_pos[:, None], neg], 1) / T, 1) - s_pos / T

    return loss(s_ext), loss(torch.cat([s_ext, s_in], 1))


def test_counting_in_image_negatives_overshoots_and_is_refused() -> None:
    m, T, n = 16, 0.5, 4000
    l_ext, l_all = _case(n, m, T, seed=0, dependent=False)  # I(U;V) = 0
    naive = math.log(1 + m + 8) - float(l_all.mean())  # what counting them in N would report
    assert naive > 0.25  # overshoots I = 0
    assert float(dense.mi_lower_bound(l_all, 1 + m + 8).mean()) == pytest.approx(naive)
    kept = dense_mi.mi_lcb(l_all, m, 1.0, T, DELTA, in_image=8)
    ext = dense_mi.mi_lcb(l_ext, m, 1.0, T, DELTA)
    noise = 3 * float(l_ext.std()) / math.sqrt(n)
    assert kept.estimate <= ext.estimate <= noise and kept.lcb < 0 and ext.lcb < 0
    assert kept.target == "I(U;V)" and "not counted" in kept.sampling
    with pytest.raises(ValueError, match="^negatives"):
        dense_mi.mi_lcb(l_all, m + 8, 1.0, T, DELTA, negatives="in_image")


def test_mi_bound_valid_labelled_and_never_above_log_1_plus_m() -> None:
    m, T, n = 16, 0.2, 2000
    l_ext, _ = _case(n, m, T, seed=1, dependent=True)
    got = dense_mi.mi_lcb(l_ext, m, 1.0, T, DELTA)
    assert 0 < got.lcb < got.estimate <= got.ceiling <= math.log1p(m)
    assert got.interval[0] < got.estimate <= got.interval[1] <= got.ceiling
    pooled = dense_mi.mi_lcb(l_ext, m, 1.0, T, DELTA, negatives="pooled")
    assert pooled.target == "I(U;V) + KL(p_V||q)" and "other than p_V" in pooled.sampling
    eb = dense_mi.mi_lcb(l_ext, m, 1.0, T, DELTA, method="bernstein")
    y = math.log1p(m) - l_ext
    want = math.sqrt(2 * float(y.var()) * math.log(2 / DELTA) / n) + 7 * _range(
        m, 1.0, T
    ) * math.log(2 / DELTA) / (3 * (n - 1))
    assert eb.margin == pytest.approx(want, rel=1e-12) and eb.margin < got.margin
    # saturation: positive = anchor, every negative opposite -> loss = psi_lo, estimate = ceiling
    floor = torch.full((50,), math.log(1 + m * math.exp(-2 / T)), dtype=F64)
    sat = dense_mi.mi_lcb(floor, m, 1.0, T, DELTA)
    assert sat.saturated and sat.estimate == pytest.approx(sat.ceiling)
    assert sat.lcb <= sat.ceiling < math.log1p(m) and sat.interval[1] == sat.ceiling
    with pytest.raises(ValueError, match="^losses"):
        dense_mi.mi_lcb(floor - 0.01, m, 1.0, T, DELTA)  # below Lemma D3's floor


BAD = [
    (lambda: dense_bounds.DenseStatsAccumulator(0, 1.0, 1.0, "own"), "p"),
    (lambda: dense_bounds.DenseStatsAccumulator(2, 1.0, 1.0, "all"), "regime"),
    (
        lambda: dense_bounds.DenseStatsAccumulator(2, 1.0, 1.0, "own").finish(),
        "DenseStatsAccumulator",
    ),
    (
        lambda: dense_bounds.DenseStatsAccumulator(2, 1.0, 1.0, "own").update(
            2 * _unit(3, 2, seed=0), _unit(3, 2, seed=1), torch.tensor([[0, 0]]), None
        ),
        "phi1",
    ),
    (
        lambda: dense_bounds.DenseStatsAccumulator(2, 1.0, 1.0, "own").update(
            _unit(3, 2, seed=0), _unit(3, 3, seed=1), torch.tensor([[0, 0]]), None
        ),
        "phi2",
    ),
    (
        lambda: dense_bounds.DenseStatsAccumulator(2, 1.0, 1.0, "own").update(
            _unit(3, 2, seed=0), _unit(3, 2, seed=1), torch.tensor([[0, 3]]), None
        ),
        "pairs",
    ),
    (
        lambda: dense_bounds.DenseStatsAccumulator(2, 1.0, 1.0, "ext").update(
            _unit(3, 2, seed=0), _unit(3, 2, seed=1), torch.tensor([[0, 1]]), None
        ),
        "pairs",
    ),
    (
        lambda: dense_bounds.correspondence_weights(torch.tensor([[0, 1], [0, 1]]), 3, 1, "own"),
        "pairs",
    ),
    (lambda: dense_bounds.gamma_dense_E(0, 4, 1, 2, 2, 1.0, 1.0, DELTA, "own"), "n"),
    (lambda: dense_bounds.gamma_dense_E(8, 4, 1, 2, 2, 1.0, 1.0, 1.5, "own"), "delta"),
    (lambda: dense_queue.queue_inner(0, 1.0, 1.0, DELTA), "m"),
    (lambda: dense_queue.queue_inner_lower(1, 1.0, 1.0), "m"),
    (
        lambda: dense_mi.mi_lcb(torch.ones(4, dtype=F64), 4, 1.0, 1.0, DELTA, method="x"),
        "method",
    ),
    (
        lambda: dense_mi.mi_lcb(torch.ones(4, dtype=F64), 4, 1.0, 1.0, DELTA, negatives="x"),
        "negatives",
    ),
]


@pytest.mark.parametrize("call,name", BAD)
def test_bad_inputs_raise_value_error_naming_argument(call, name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call()
