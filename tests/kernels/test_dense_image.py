"""crl.kernels.dense.image: the per-image dense loss h (docs/theory/dense-bounds.md D4) against a
naive loop over images, positions and negatives in float64, and DenseCL's combined objective."""

from __future__ import annotations

import math

import pytest
import torch

from crl.kernels.dense import image as dense_image

F64 = torch.float64


def naive_h(q, k, ext, match, negatives: str, T: float) -> list[float]:
    """h_i = sum_{a in A} (1/|A|) log(1 + sum_{u in N(a)} exp((s_au - s_ab)/T)), term by term."""
    out = []
    for i in range(q.shape[0]):
        anchors = [a for a in range(q.shape[1]) if int(match[i, a]) >= 0]
        total = 0.0
        for a in anchors:
            b = int(match[i, a])
            s_ab = float(q[i, a] @ k[i, b])
            contrast = []
            if negatives == "own":
                contrast += [float(q[i, a] @ k[i, u]) for u in range(k.shape[1]) if u != b]
            negs = ext if ext.ndim == 2 else ext[i]
            contrast += [float(q[i, a] @ negs[j]) for j in range(negs.shape[0])]
            total += math.log(1.0 + sum(math.exp((s - s_ab) / T) for s in contrast))
        out.append(total / len(anchors))
    return out


def _case(seed: int, n=3, k1=5, k2=4, m=3, d=2, shared=False, full=False):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(n, k1, d, generator=gen, dtype=F64)
    k = torch.randn(n, k2, d, generator=gen, dtype=F64)
    ext = torch.randn(*((m, d) if shared else (n, m, d)), generator=gen, dtype=F64)
    match = torch.randint(-1 if not full else 0, k2, (n, k1), generator=gen)
    match[:, 0] = torch.randint(0, k2, (n,), generator=gen)  # every image matched somewhere
    return q, k, ext, match


@pytest.mark.parametrize("negatives", ["own", "ext"])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("T", [0.2, 1.0])
def test_matches_the_naive_loop(negatives: str, shared: bool, T: float) -> None:
    for seed in range(4):
        q, k, ext, match = _case(seed, shared=shared)
        got = dense_image.image_losses(q, k, ext, match, negatives, T)
        want = torch.tensor(naive_h(q, k, ext, match, negatives, T), dtype=F64)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_argmax_style_many_to_one_matches() -> None:
    """Several queries may share one key (argmax); own negatives are then all other keys."""
    q, k, ext, _ = _case(7, k1=4, k2=4)
    match = torch.tensor([[2, 2, 2, 0], [1, 1, 3, 3], [0, 1, 2, 3]])
    got = dense_image.image_losses(q, k, ext, match, "own", 0.5)
    torch.testing.assert_close(got, torch.tensor(naive_h(q, k, ext, match, "own", 0.5), dtype=F64))


def test_collinear_closed_form() -> None:
    """All scores equal: psi = log(1 + N) with N = K2 - 1 + m (own) or m (ext)."""
    n, k1, k2, m, d = 2, 3, 4, 5, 3
    v = torch.ones(d, dtype=F64) / math.sqrt(d)
    q, k = v.expand(n, k1, d), v.expand(n, k2, d)
    ext = v.expand(n, m, d)
    match = torch.zeros(n, k1, dtype=torch.int64)
    own = dense_image.image_losses(q, k, ext, match, "own", 0.3)
    ext_only = dense_image.image_losses(q, k, ext, match, "ext", 0.3)
    torch.testing.assert_close(own, torch.full((n,), math.log(k2 + m), dtype=F64))
    torch.testing.assert_close(ext_only, torch.full((n,), math.log(1 + m), dtype=F64))


def test_own_loss_is_at_least_the_ext_loss() -> None:
    """Adding the in-image keys to the denominator only raises the loss
    (docs/theory/dense-bounds.md section 6, rule 1)."""
    for seed in range(5):
        q, k, ext, match = _case(seed)
        own = dense_image.image_losses(q, k, ext, match, "own", 0.7)
        ext_only = dense_image.image_losses(q, k, ext, match, "ext", 0.7)
        assert bool((own >= ext_only - 1e-12).all())


def test_gradients_by_gradcheck() -> None:
    q, k, ext, match = _case(3, n=2, k1=3, k2=3, m=2)
    for tensor in (q, k, ext):
        tensor.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda a, b, c: dense_image.image_losses(a, b, c, match, "own", 0.5), (q, k, ext)
    )


def test_combined_loss_and_errors() -> None:
    dense, glob = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 5.0])
    torch.testing.assert_close(
        dense_image.combined_loss(dense, glob, 0.25), 0.75 * glob + 0.25 * dense
    )
    assert dense_image.combined_loss(dense, None, 1.0) is dense
    with pytest.raises(ValueError, match="global branch"):
        dense_image.combined_loss(dense, None, 0.5)
    with pytest.raises(ValueError, match="lam"):
        dense_image.combined_loss(dense, glob, 1.5)
    q, k, ext, match = _case(0)
    match[1] = -1
    with pytest.raises(ValueError, match="no matched position"):
        dense_image.image_losses(q, k, ext, match, "own", 1.0)
    with pytest.raises(ValueError, match="negatives"):
        dense_image.image_losses(q, k, ext, match.clamp(min=0), "all", 1.0)
    with pytest.raises(ValueError, match="ext"):
        dense_image.image_losses(q, k, ext[:, :, :1], match.clamp(min=0), "own", 1.0)
