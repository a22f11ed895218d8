"""crl.losses against float64 loops transcribed from the formulas, closed forms and properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from crl import losses
from crl.kernels import fused_contrast, fused_scores

L0 = 1.0 + 1.0 / math.log(2.0)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed), dtype=dtype)


# ---- naive references: Python loops over floats, one line per formula ----


def ref_k_negative(v: list[list[float]], loss: str) -> list[float]:
    if loss == "hinge":
        return [max(0.0, 1.0 + max(-vi for vi in row)) for row in v]
    return [math.log2(1.0 + sum(math.exp(-vi) for vi in row)) for row in v]


def ref_lse_risk(pos: list[float], neg: list[list[float]], T: float) -> list[float]:
    return [
        T * math.log(sum(math.exp((nj - p) / T) for nj in row) / len(row))
        for p, row in zip(pos, neg, strict=True)
    ]


def ref_info_nce(pos: list[float], neg: list[list[float]], T: float) -> list[float]:
    out = []
    for p, row in zip(pos, neg, strict=True):
        num = math.exp(p / T)
        out.append(-math.log(num / (num + sum(math.exp(nj / T) for nj in row))))
    return out


def ref_nt_xent(z1: list[list[float]], z2: list[list[float]], T: float) -> float:
    z = [[x / math.sqrt(sum(y * y for y in row)) for x in row] for row in z1 + z2]
    n, half = len(z), len(z1)

    def s(i: int, j: int) -> float:
        return sum(a * b for a, b in zip(z[i], z[j], strict=True)) / T

    total = 0.0
    for i in range(n):
        p = (i + half) % n
        den = sum(math.exp(s(i, j)) for j in range(n) if j != i)
        total += -math.log(math.exp(s(i, p)) / den)
    return total / n


# ---- elementwise losses ----


def test_hinge_and_logistic_values() -> None:
    t = torch.tensor([-3.0, -1.0, 0.0, 0.5, 2.0], dtype=torch.float64)
    assert losses.hinge(t).tolist() == [0.0, 0.0, 1.0, 1.5, 3.0]
    expected = [math.log2(1 + math.exp(x)) for x in t.tolist()]
    torch.testing.assert_close(losses.logistic(t), torch.tensor(expected, dtype=torch.float64))


@settings(max_examples=200, deadline=None)
@given(
    a=st.floats(-50, 50),
    b=st.floats(-50, 50),
    name=st.sampled_from(["hinge", "logistic"]),
)
def test_loss_facts(a: float, b: float, name: str) -> None:
    """docs/theory/statements.md S1: convex, nondecreasing, L0-Lipschitz, value 1 at 0."""
    f = getattr(losses, name)
    la, lb, lmid, l0 = (
        float(f(torch.tensor(x, dtype=torch.float64))) for x in (a, b, (a + b) / 2, 0.0)
    )
    assert l0 == pytest.approx(1.0, abs=1e-15)
    assert lmid <= (la + lb) / 2 + 1e-12
    if a <= b:
        assert la <= lb + 1e-12
    assert abs(la - lb) <= L0 * abs(a - b) + 1e-12


@pytest.mark.parametrize("loss", ["hinge", "logistic"])
def test_one_negative_applies_loss_to_score(loss: str) -> None:
    q = _randn(7, seed=1)
    torch.testing.assert_close(losses.one_negative(q, loss), getattr(losses, loss)(q))


def test_triplet_score_loop() -> None:
    fx, fp, fn = _randn(4, 3, seed=1), _randn(4, 3, seed=2), _randn(4, 3, seed=3)
    expected = [sum(fx[i, t] * (fn[i, t] - fp[i, t]) for t in range(3)).item() for i in range(4)]
    torch.testing.assert_close(losses.triplet_score(fx, fp, fn).tolist(), expected)


# ---- k negatives ----


@pytest.mark.parametrize("path", losses.SCORE_PATHS)
@pytest.mark.parametrize("loss", ["hinge", "logistic"])
@pytest.mark.parametrize("n,k", [(1, 1), (5, 1), (4, 3), (6, 10)])
def test_k_negative_loop(loss: str, n: int, k: int, path: str) -> None:
    v = _randn(n, k, seed=n * 31 + k)
    expected = ref_k_negative(v.tolist(), loss)
    torch.testing.assert_close(losses.k_negative(v, loss, path=path).tolist(), expected)


@pytest.mark.parametrize("loss", ["hinge", "logistic"])
def test_k_negative_with_one_negative_is_one_negative(loss: str) -> None:
    fx, fp, fn = _randn(6, 4, seed=1), _randn(6, 4, seed=2), _randn(6, 4, seed=3)
    v = losses.k_negative_margins(fx, fp, fn[:, None, :])  # (6, 1)
    q = losses.triplet_score(fx, fp, fn)
    torch.testing.assert_close(losses.k_negative(v, loss), losses.one_negative(q, loss))
    torch.testing.assert_close(losses.k_negative(v, loss), losses.one_negative(-v[:, 0], loss))


def test_k_negative_margins_own_and_shared_loops() -> None:
    n, k, d = 3, 4, 5
    fx, fp = _randn(n, d, seed=1), _randn(n, d, seed=2)
    own, shared = _randn(n, k, d, seed=3), _randn(k, d, seed=4)

    def dot(a: torch.Tensor, b: torch.Tensor) -> float:
        return sum(a[t].item() * b[t].item() for t in range(d))

    exp_own = [[dot(fx[i], fp[i]) - dot(fx[i], own[i, j]) for j in range(k)] for i in range(n)]
    exp_sh = [[dot(fx[i], fp[i]) - dot(fx[i], shared[j]) for j in range(k)] for i in range(n)]
    torch.testing.assert_close(losses.k_negative_margins(fx, fp, own).tolist(), exp_own)
    torch.testing.assert_close(losses.k_negative_margins(fx, fp, shared).tolist(), exp_sh)
    own_scores = [[dot(fx[i], own[i, j]) for j in range(k)] for i in range(n)]
    torch.testing.assert_close(losses.scores_own(fx, own).tolist(), own_scores)
    sh_scores = [[dot(fx[i], shared[j]) for j in range(k)] for i in range(n)]
    torch.testing.assert_close(losses.scores_shared(fx, shared).tolist(), sh_scores)


# ---- LSE risk (Li et al.) and InfoNCE ----


@pytest.mark.parametrize("path", losses.SCORE_PATHS)
@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("T", [0.1, 0.5, 2.0])
@pytest.mark.parametrize("n,m", [(1, 1), (4, 3), (7, 16)])
def test_lse_risk_and_info_nce_loops(T: float, n: int, m: int, grad: bool, path: str) -> None:
    pos = _randn(n, seed=n + m).requires_grad_(grad)
    neg = _randn(n, m, seed=n * m + 7).requires_grad_(grad)
    lse_ref = ref_lse_risk(pos.tolist(), neg.tolist(), T)
    nce_ref = ref_info_nce(pos.tolist(), neg.tolist(), T)
    for f, ref in ((losses.lse_risk, lse_ref), (losses.info_nce, nce_ref)):
        per_anchor = f(pos, neg, T, reduction="none", path=path)
        torch.testing.assert_close(per_anchor.tolist(), ref, rtol=1e-12, atol=1e-12)
        mean = f(pos, neg, T, path=path)
        assert mean.item() == pytest.approx(sum(ref) / n, rel=1e-12)


def ref_score_gradients(
    pos: list[float], neg: list[list[float]], T: float, zero_logit: bool
) -> tuple[list[float], list[list[float]]]:
    """d/dpos and d/dneg of sum_i l_i, l = info_nce (zero logit) or lse_risk, by the softmax."""
    grad_pos, grad_neg = [], []
    for p, row in zip(pos, neg, strict=True):
        e = [math.exp((nj - p) / T) for nj in row]
        total = sum(e) + (1.0 if zero_logit else 0.0)
        scale = 1.0 / T if zero_logit else 1.0  # info_nce has no factor T outside, lse has
        grad_neg.append([scale * ej / total for ej in e])
        grad_pos.append(-scale * sum(e) / total)
    return grad_pos, grad_neg


@pytest.mark.parametrize("reduction", losses.REDUCTIONS)
@pytest.mark.parametrize("name", ["lse_risk", "info_nce"])
@pytest.mark.parametrize("path", ["plain", "fused"])
def test_score_loss_gradients_loop(path: str, name: str, reduction: str) -> None:
    n, m, T = 6, 9, 0.4
    pos = _randn(n, seed=3).requires_grad_()
    neg = _randn(n, m, seed=4).requires_grad_()
    value = getattr(losses, name)(pos, neg, T, reduction=reduction, path=path)
    weight = torch.linspace(0.5, 2.0, n, dtype=torch.float64)  # a grad_output that is not 1
    (value * weight).sum().backward() if reduction == "none" else (2.5 * value).backward()
    ref_pos, ref_neg = ref_score_gradients(pos.tolist(), neg.tolist(), T, name == "info_nce")
    w = weight.tolist() if reduction == "none" else [2.5 / n] * n
    torch.testing.assert_close(
        pos.grad.tolist(), [g * wi for g, wi in zip(ref_pos, w, strict=True)], rtol=1e-12, atol=0
    )
    expected = [[g * wi for g in row] for row, wi in zip(ref_neg, w, strict=True)]
    torch.testing.assert_close(neg.grad.tolist(), expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("reduction", losses.REDUCTIONS)
def test_fused_score_losses_equal_plain_at_size(reduction: str) -> None:
    """Above PLAIN_MAX_SCORES "auto" runs fused; values and gradients equal the plain path."""
    n, m, T = 300, 240, 0.07
    assert n * m > losses.PLAIN_MAX_SCORES
    pos0, neg0 = _randn(n, seed=5), 0.9 * _randn(n, m, seed=6)
    for name in ("lse_risk", "info_nce", "k_negative"):
        got = {}
        for path in ("plain", "auto"):
            pos, neg = pos0.clone().requires_grad_(), neg0.clone().requires_grad_()
            if name == "k_negative":
                value = losses.k_negative(neg, "logistic", path=path)
                value = value.mean() if reduction == "mean" else value
            else:
                value = getattr(losses, name)(pos, neg, T, reduction=reduction, path=path)
            fused = value.grad_fn is not None and "LogSumExp" in type(value.grad_fn).__name__
            assert fused == (path == "auto") or name == "k_negative"
            value.sum().backward()
            got[path] = (value.detach(), neg.grad, pos.grad)
        torch.testing.assert_close(got["auto"][0], got["plain"][0], rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(got["auto"][1], got["plain"][1], rtol=1e-10, atol=1e-15)
        if name != "k_negative":
            torch.testing.assert_close(got["auto"][2], got["plain"][2], rtol=1e-10, atol=1e-15)


def test_auto_path_is_plain_up_to_the_threshold() -> None:
    neg = _randn(4, losses.PLAIN_MAX_SCORES // 4).requires_grad_()
    pos = _randn(4).requires_grad_()
    for f in (losses.lse_risk, losses.info_nce):
        assert "LogSumExp" not in type(f(pos, neg, 0.5).grad_fn).__name__
        assert "LogSumExp" in type(f(pos, neg, 0.5, path="fused").grad_fn).__name__
    assert "LogSumExp" in type(losses.k_negative(neg, "logistic", "fused").grad_fn).__name__


def test_fused_path_differentiates_once_plain_twice() -> None:
    pos, neg = _randn(3, seed=1).requires_grad_(), _randn(3, 4, seed=2).requires_grad_()
    for f in (losses.lse_risk, losses.info_nce):
        assert torch.autograd.gradgradcheck(
            lambda p, q, f=f: f(p, q, 0.3, path="plain"), (pos, neg)
        )
        (grad,) = torch.autograd.grad(f(pos, neg, 0.3, path="fused"), neg, create_graph=True)
        assert not grad.requires_grad  # a second derivative raises, it is never a silent zero
        with pytest.raises(RuntimeError):
            grad.sum().backward()


def test_fused_without_grad_equals_with_grad() -> None:
    pos, neg = _randn(5, seed=1), _randn(5, 7, seed=2)
    for f in (losses.lse_risk, losses.info_nce):
        for reduction in losses.REDUCTIONS:
            plain = f(pos, neg, 0.2, reduction=reduction, path="fused")
            graded = f(pos.clone().requires_grad_(), neg, 0.2, reduction=reduction, path="fused")
            assert torch.equal(plain, graded.detach())


# ---- shared negatives from features ----


def _shared_inputs(n: int, m: int, d: int = 5) -> tuple[torch.Tensor, ...]:
    fx, fpos = _randn(n, d, seed=n), _randn(n, d, seed=n + 1)
    return fx, fpos, _randn(m, d, seed=m + 2)


@pytest.mark.parametrize("loss", losses.SHARED_LOSSES)
@pytest.mark.parametrize("block", [1, 4, 37])
def test_shared_negatives_blocked_value_and_gradients_against_loops(loss: str, block: int) -> None:
    """Every block size gives the loop's value and the scores path's gradients (float64)."""
    T = 0.3
    fx, fpos, fneg = _shared_inputs(37, 11)
    pos = [
        sum(a * b for a, b in zip(x, y, strict=True))
        for x, y in zip(fx.tolist(), fpos.tolist(), strict=True)
    ]
    neg = [
        [sum(a * b for a, b in zip(x, y, strict=True)) for y in fneg.tolist()] for x in fx.tolist()
    ]
    ref = ref_info_nce(pos, neg, T) if loss == "info_nce" else ref_lse_risk(pos, neg, T)
    got = {}
    for path in ("scores", "blocked"):
        leaves = [t.clone().requires_grad_() for t in (fx, fpos, fneg)]
        if path == "blocked":
            value = fused_scores.shared_log_sum_exp_loss(
                *leaves,
                T,
                loss == "info_nce",
                *((T, math.log(11)) if loss == "lse" else ()),
                block=block,
            )
        else:
            value = losses.shared_negatives_loss(*leaves, T, loss, path)
        assert value.item() == pytest.approx(sum(ref) / 37, rel=1e-12)
        (2.5 * value).backward()
        got[path] = [leaf.grad for leaf in leaves]
    for blocked, plain in zip(got["blocked"], got["scores"], strict=True):
        torch.testing.assert_close(blocked, plain, rtol=1e-11, atol=1e-14)


@pytest.mark.parametrize("loss", losses.SHARED_LOSSES)
def test_shared_negatives_blocked_gradcheck_and_a_queue_without_grad(loss: str) -> None:
    fx, fpos, fneg = (t.requires_grad_() for t in _shared_inputs(6, 4, 3))

    def blocked(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        extra = (0.4, math.log(4)) if loss == "lse" else ()
        return fused_scores.shared_log_sum_exp_loss(
            a, b, c, 0.4, loss == "info_nce", *extra, block=4
        )

    assert torch.autograd.gradcheck(blocked, (fx, fpos, fneg))
    queue = fneg.detach()
    value = losses.shared_negatives_loss(fx, fpos, queue, 0.4, loss, path="blocked")
    value.backward()
    assert queue.grad is None and fx.grad is not None and fpos.grad is not None
    with torch.no_grad():
        assert (
            losses.shared_negatives_loss(fx, fpos, fneg, 0.4, loss, "blocked").item()
            == value.item()
        )


def test_shared_negatives_auto_path_by_size() -> None:
    """Blocked once the scores exceed one block and outnumber the features (m > d)."""
    n = fused_scores.BLOCK_SCORES // 8

    def blocked(d: int, m: int) -> bool:
        fx, fpos, fneg = (torch.zeros(k, d, requires_grad=True) for k in (n, n, m))
        value = losses.shared_negatives_loss(fx, fpos, fneg, 0.5)
        return "Blocked" in type(value.grad_fn).__name__

    assert not blocked(2, 8) and blocked(2, 9)  # n m = BLOCK_SCORES, then above it
    assert not blocked(16, 16)  # n m > BLOCK_SCORES, but m <= d


def test_fused_infinite_scores_as_logsumexp() -> None:
    """Fused: a score of +inf gives +inf; a row of -inf gives -inf (LSE) and 0 (InfoNCE)."""
    pos = torch.zeros(2, dtype=torch.float64)
    neg = torch.tensor([[0.0, math.inf], [-math.inf, -math.inf]], dtype=torch.float64)
    lse = losses.lse_risk(pos, neg, 1.0, reduction="none", path="fused")
    assert lse.tolist() == [math.inf, -math.inf]
    assert losses.info_nce(pos, neg, 1.0, reduction="none", path="fused").tolist() == [
        math.inf,
        0.0,
    ]


def test_sscrl_shared_negatives_feed_the_same_kernel() -> None:
    fx, fp, shared = _randn(5, 3, seed=1), _randn(5, 3, seed=2), _randn(4, 3, seed=3)
    pos = (fx * fp).sum(1)
    own = shared.expand(5, 4, 3)  # every anchor holds the same 4 negatives
    torch.testing.assert_close(
        losses.lse_risk(pos, losses.scores_shared(fx, shared), 0.3),
        losses.lse_risk(pos, losses.scores_own(fx, own), 0.3),
    )


@pytest.mark.parametrize("m", [1, 5, 64])
def test_equal_scores_closed_forms(m: int) -> None:
    pos, neg = torch.full((3,), 0.7), torch.full((3, m), 0.7)
    assert losses.lse_risk(pos, neg, 0.2).item() == pytest.approx(0.0, abs=1e-6)
    assert losses.info_nce(pos, neg, 0.2).item() == pytest.approx(math.log(1 + m), rel=1e-6)


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(st.floats(-20, 20), min_size=1, max_size=12),
    pos=st.floats(-20, 20),
    T=st.floats(0.05, 10.0),
    path=st.sampled_from(["plain", "fused"]),
)
def test_lse_risk_bounds(rows: list[float], pos: float, T: float, path: str) -> None:
    """max_j D_j - T log m <= lse_risk <= max_j D_j; info_nce >= lse_risk / T + log m."""
    p = torch.tensor([pos], dtype=torch.float64)
    neg = torch.tensor([rows], dtype=torch.float64)
    m, top = len(rows), max(rows) - pos
    risk = losses.lse_risk(p, neg, T, path=path).item()
    assert top - T * math.log(m) - 1e-9 <= risk <= top + 1e-9
    assert losses.info_nce(p, neg, T, path=path).item() >= risk / T + math.log(m) - 1e-9


# ---- NT-Xent ----


@pytest.mark.parametrize("path", losses.NT_XENT_PATHS)
@pytest.mark.parametrize("T", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("B,D", [(2, 3), (5, 4), (8, 16)])
def test_nt_xent_loop(T: float, B: int, D: int, path: str) -> None:
    z1, z2 = _randn(B, D, seed=B), _randn(B, D, seed=B + 100)
    expected = ref_nt_xent(z1.tolist(), z2.tolist(), T)
    assert losses.nt_xent(z1, z2, T, path).item() == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("path", losses.NT_XENT_PATHS)
@pytest.mark.parametrize("B", [2, 3, 17])
def test_nt_xent_collinear(B: int, path: str) -> None:
    z = torch.tensor([[3.0, 4.0]]).expand(B, 2)
    for T in (1e-4, 0.07, 1.0):
        value = losses.nt_xent(z, 2 * z, T, path).item()
        assert value == pytest.approx(math.log(2 * B - 1), rel=1e-5)


@pytest.mark.parametrize("B,block", [(2, 1), (5, 3), (9, 4), (16, 32), (130, 64)])
def test_nt_xent_blocked_value_and_gradient_against_autograd(B: int, block: int) -> None:
    """Every block size gives the loop's value, and the gradient computed in the forward pass
    equals autograd's through the plain path (float64), also when scaled by a grad_output."""
    z1 = _randn(B, 6, seed=B).requires_grad_()
    z2 = _randn(B, 6, seed=B + 7).requires_grad_()
    T = 0.3
    z = torch.nn.functional.normalize(torch.cat([z1, z2]), dim=1)
    blocked = fused_contrast.nt_xent_blocked(z, T, block=block)
    expected = ref_nt_xent(z1.tolist(), z2.tolist(), T)
    assert blocked.item() == pytest.approx(expected, rel=1e-12)
    got = torch.autograd.grad(3.5 * blocked, (z1, z2))
    want = torch.autograd.grad(3.5 * losses.nt_xent(z1, z2, T, "plain"), (z1, z2))
    for g, w in zip(got, want, strict=True):
        assert torch.allclose(g, w, rtol=0, atol=1e-13)
    with torch.no_grad():
        assert fused_contrast.nt_xent_blocked(z, T, block).item() == blocked.item()


@pytest.mark.parametrize("path", ["plain", "blocked"])
def test_nt_xent_float32_near_collinear_at_tiny_temperature(path: str) -> None:
    """Every row near one direction (the hard case for rounding): float32 within 2e-5 of
    float64 down to T = 1e-4."""
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(1, 16, generator=gen, dtype=torch.float64)
    z1 = base + 1e-2 * torch.randn(64, 16, generator=gen, dtype=torch.float64)
    z2 = z1 + 3e-3 * torch.randn(64, 16, generator=gen, dtype=torch.float64)
    for T in (1e-4, 1e-3, 0.1):
        exact = losses.nt_xent(z1, z2, T, "plain").item()
        single = losses.nt_xent(z1.float(), z2.float(), T, path).item()
        assert single == pytest.approx(exact, rel=2e-5)


def test_nt_xent_blocked_gradcheck() -> None:
    z1, z2 = _randn(3, 4, seed=1).requires_grad_(), _randn(3, 4, seed=2).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: losses.nt_xent(a, b, 0.4, "blocked"), (z1, z2))


def test_nt_xent_auto_takes_the_blocked_path_above_the_threshold() -> None:
    B = losses.PLAIN_MAX_ROWS // 2 + 1
    z1, z2 = _randn(B, 4, seed=3).requires_grad_(), _randn(B, 4, seed=4)
    auto = losses.nt_xent(z1, z2, 0.5)
    assert type(auto.grad_fn).__name__ == "_BlockedNTXentBackward"
    plain = losses.nt_xent(z1, z2, 0.5, "plain")
    assert auto.item() == pytest.approx(plain.item(), rel=1e-12)
    small = losses.nt_xent(z1[:4], z2[:4], 0.5)
    assert type(small.grad_fn).__name__ != "_BlockedNTXentBackward"


@pytest.mark.parametrize("B,T", [(4, 0.07), (33, 0.5)])
def test_nt_xent_matches_pytorch_metric_learning(B: int, T: float) -> None:
    pml = pytest.importorskip("pytorch_metric_learning.losses")
    z1, z2 = _randn(B, 8, seed=1, dtype=torch.float32), _randn(B, 8, seed=2, dtype=torch.float32)
    theirs = pml.NTXentLoss(temperature=T)(torch.cat([z1, z2]), torch.arange(B).repeat(2))
    assert abs(losses.nt_xent(z1, z2, T).item() - theirs.item()) <= 1e-5


# ---- gradients and stability ----


GRAD_CASES = {
    "hinge": lambda x: losses.hinge(x[:, 0]),
    "logistic": lambda x: losses.logistic(x[:, 0]),
    "one_negative_hinge": lambda x: losses.one_negative(x[:, 0], "hinge"),
    "one_negative_logistic": lambda x: losses.one_negative(x[:, 0], "logistic"),
    "k_negative_hinge": lambda x: losses.k_negative(x, "hinge"),
    "k_negative_logistic": lambda x: losses.k_negative(x, "logistic"),
    "k_negative_logistic_fused": lambda x: losses.k_negative(x, "logistic", "fused"),
    "lse_risk": lambda x: losses.lse_risk(x[:, 0], x[:, 1:], 0.3),
    "lse_risk_fused": lambda x: losses.lse_risk(x[:, 0], x[:, 1:], 0.3, "none", "fused"),
    "info_nce": lambda x: losses.info_nce(x[:, 0], x[:, 1:], 0.3, reduction="none"),
    "info_nce_fused": lambda x: losses.info_nce(x[:, 0], x[:, 1:], 0.3, path="fused"),
    "nt_xent": lambda x: losses.nt_xent(x[:2], x[2:], 0.4),
    "triplet_score": lambda x: losses.triplet_score(x[:, :2], x[:, 2:4], x[:, 3:5]),
    "k_negative_margins": lambda x: losses.k_negative_margins(x[:, :2], x[:, 2:4], x[:3, 3:]),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradcheck(name: str) -> None:
    x = (0.37 * _randn(4, 5, seed=11)).requires_grad_()  # away from hinge kinks
    assert torch.autograd.gradcheck(GRAD_CASES[name], (x,))


def _finite_with_grad(value: torch.Tensor, leaf: torch.Tensor) -> None:
    assert torch.isfinite(value).all()
    (grad,) = torch.autograd.grad(value.sum(), leaf)
    assert torch.isfinite(grad).all()


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_stable_at_scores_over_t_of_1e4_float32(sign: float) -> None:
    T = 1e-4
    pos = torch.zeros(3, requires_grad=True)
    neg = (sign * torch.ones(3, 4)).requires_grad_()  # (neg - pos) / T = +-1e4
    for path in ("plain", "fused"):
        for f in (losses.lse_risk, losses.info_nce):
            _finite_with_grad(f(pos, neg, T, reduction="none", path=path), neg)
        risk = losses.lse_risk(pos, neg, T, reduction="none", path=path)
        torch.testing.assert_close(risk, torch.full((3,), sign))  # all D_j equal: risk = D
    v = (sign * 1e4 * torch.ones(3, 2)).requires_grad_()
    for loss in ("hinge", "logistic"):
        _finite_with_grad(losses.k_negative(v, loss), v)
        _finite_with_grad(losses.k_negative(v, loss, path="fused"), v)
        _finite_with_grad(losses.one_negative(v[:, 0], loss), v)
    z1 = torch.randn(6, 5, generator=_gen(0)).requires_grad_()
    z2 = (sign * z1 + 0.1 * torch.randn(6, 5, generator=_gen(1))).detach()
    _finite_with_grad(losses.nt_xent(z1, z2, T), z1)


# ---- validation ----

A, P, N = torch.zeros(3, 2), torch.zeros(3), torch.zeros(3, 4)

BAD_INPUTS = [
    (lambda: losses.hinge([1.0]), "t"),
    (lambda: losses.logistic(torch.tensor([1, 2])), "t"),
    (lambda: losses.one_negative(P, "square"), "loss"),
    (lambda: losses.one_negative(N, "hinge"), "q"),
    (lambda: losses.k_negative(N, "exp"), "loss"),
    (lambda: losses.k_negative(torch.zeros(3, 0)), "v"),
    (lambda: losses.k_negative(P), "v"),
    (lambda: losses.triplet_score(A, torch.zeros(3, 3), A), "fpos"),
    (lambda: losses.triplet_score(P, P, P), "fx"),
    (lambda: losses.k_negative_margins(A, A, torch.zeros(3, 4, 5)), "fneg"),
    (lambda: losses.k_negative_margins(A, A, torch.zeros(0, 2)), "fneg"),
    (lambda: losses.scores_own(A, torch.zeros(3, 0, 2)), "fneg"),
    (lambda: losses.scores_shared(A, torch.zeros(4, 3)), "fneg"),
    (lambda: losses.lse_risk(P, N, 0.0), "temperature"),
    (lambda: losses.lse_risk(P, N, -1.0), "temperature"),
    (lambda: losses.lse_risk(P, N, float("nan")), "temperature"),
    (lambda: losses.lse_risk(P, torch.zeros(3, 0), 1.0), "neg"),
    (lambda: losses.lse_risk(P, torch.zeros(2, 4), 1.0), "neg"),
    (lambda: losses.lse_risk(N, N, 1.0), "pos"),
    (lambda: losses.lse_risk(P, N, 1.0, reduction="sum"), "reduction"),
    (lambda: losses.info_nce(P, torch.zeros(3, 0), 1.0), "neg"),
    (lambda: losses.info_nce(P, N, 0), "temperature"),
    (lambda: losses.info_nce(P, N, 1.0, reduction="max"), "reduction"),
    (lambda: losses.info_nce(P, N, 1.0, path="fast"), "path"),
    (lambda: losses.lse_risk(P, N, 1.0, path="blocked"), "path"),
    (lambda: losses.k_negative(N, "logistic", path="plainly"), "path"),
    (lambda: losses.shared_negatives_loss(A, torch.zeros(3, 3), A, 0.5), "fpos"),
    (lambda: losses.shared_negatives_loss(A, A, torch.zeros(4, 3), 0.5), "fneg"),
    (lambda: losses.shared_negatives_loss(P, P, A, 0.5), "fx"),
    (lambda: losses.shared_negatives_loss(A, A, A, 0.0), "temperature"),
    (lambda: losses.shared_negatives_loss(A, A, A, 0.5, loss="hinge"), "loss"),
    (lambda: losses.shared_negatives_loss(A, A, A, 0.5, path="fused"), "path"),
    (lambda: losses.shared_negatives_loss(A, A.double(), A, 0.5), "fpos"),
    (lambda: losses.shared_negatives_loss(A, A, A.double(), 0.5), "fneg"),
    (lambda: losses.nt_xent(A, torch.zeros(3, 3), 0.5), "z2"),
    (lambda: losses.nt_xent(torch.zeros(1, 2), torch.zeros(1, 2), 0.5), "z1"),
    (lambda: losses.nt_xent(A, A, -0.5), "temperature"),
    (lambda: losses.nt_xent(A, A, 0.5, path="fast"), "path"),
]


@pytest.mark.parametrize("call,name", BAD_INPUTS)
def test_bad_inputs_raise_value_error_naming_argument(call, name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call()
