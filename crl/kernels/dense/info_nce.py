"""Dense contrastive learning (docs/theory/statements.md C; Wang et al. CVPR 2021, DenseCL).

Dense InfoNCE over corresponding grid positions of two views, its mutual-information lower bound,
and geometric and feature-argmax correspondences. Kernels are pure functions of tensors on the
device of their inputs; the queue and the momentum update are in crl.kernels.dense.memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from crl.kernels import _validate
from crl.kernels.losses import REDUCTIONS

PATHS = ("auto", "direct", "chunked")
DIRECT_MAX_LOGITS = 2**24  # "auto": one autograd pass up to this many logits (bench/dense_loss.py)

__all__ = [
    "DIRECT_MAX_LOGITS",
    "PATHS",
    "argmax_correspondence",
    "batch_pairs",
    "dense_contrast_size",
    "dense_info_nce",
    "geometric_correspondence",
    "mi_lower_bound",
]


def _pairs_tensor(pairs: object, cols: int) -> torch.Tensor:
    p = _validate.tensor("pairs", pairs)
    _validate.shape(
        "pairs",
        p,
        f"(P, {cols}) with P >= 1",
        p.ndim == 2 and p.shape[1] == cols and p.shape[0] >= 1,
    )
    if p.dtype != torch.int64:
        raise ValueError(f"pairs has dtype {p.dtype}: expected torch.int64")
    return p


def _pair_losses(
    anchors: torch.Tensor,
    v2flat: torch.Tensor,
    queue: torch.Tensor | None,
    image: torch.Tensor,
    target: torch.Tensor,
    other_pos: torch.Tensor,
    inv_t: float,
) -> torch.Tensor:
    """L_local for one chunk of c pairs: logsumexp over contrast set minus the positive logit.

    Shape: anchors (c, C), v2flat (B*K2, C), queue (Q, C) or None, image (c,), target (c,)
    flat index b*K2 + k2 of the positive, other_pos (c, K2) bool (the anchor's other positives,
    removed from the contrast set) -> (c,).
    """
    a = anchors * inv_t  # (c, C), scaled so logits = <v1, u> / T
    logits = a @ v2flat.T  # (c, B*K2)
    pos = logits.gather(1, target[:, None]).squeeze(1)  # (c,)
    mask = _other_mask(image, other_pos, v2flat.shape[0])  # (c, B*K2)
    lse = torch.logsumexp(logits.masked_fill(mask, -math.inf), dim=1)  # (c,)
    if queue is not None:
        lse = torch.logaddexp(lse, torch.logsumexp(a @ queue.T, dim=1))  # (c, Q) -> (c,)
    return lse - pos


def _other_mask(image: torch.Tensor, other_pos: torch.Tensor, columns: int) -> torch.Tensor:
    """Shape: image (c,), other_pos (c, K2) -> (c, B*K2) bool, True at the other positives."""
    c, k2 = other_pos.shape
    mask = torch.zeros(c, columns // k2, k2, dtype=torch.bool, device=other_pos.device)
    mask[torch.arange(c, device=other_pos.device), image] = other_pos  # (c, B, K2)
    return mask.view(c, columns)


class _ChunkedPairLosses(torch.autograd.Function):
    """`_pair_losses` over `chunk` rows at a time, saving only the (P,) losses; the backward pass
    recomputes each chunk's logits and writes the softmax gradient in place:
    d L_r / d a_r = (sum_j p_rj u_j - u_t(r)) / T, d L_r / d u_j = (p_rj - [j = t(r)]) a_r / T for
    the rows u_j of view 2 (the queue gets none). Memory O(chunk * (B*K2 + Q)) both ways, and
    one matmul more than a single autograd pass (the recomputation).
    """

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        anchors: torch.Tensor,
        v2flat: torch.Tensor,
        queue: torch.Tensor | None,
        image: torch.Tensor,
        target: torch.Tensor,
        other_pos: torch.Tensor,
        inv_t: float,
        chunk: int,
    ) -> torch.Tensor:
        parts = []
        with torch.no_grad():
            for s in range(0, anchors.shape[0], chunk):
                r = slice(s, s + chunk)
                args = (anchors[r], v2flat, queue, image[r], target[r], other_pos[r], inv_t)
                parts.append(_pair_losses(*args))
        per = torch.cat(parts)  # (P,)
        ctx.save_for_backward(anchors, v2flat, queue, image, target, other_pos, per)
        ctx.inv_t, ctx.chunk = inv_t, chunk
        return per

    @staticmethod
    @once_differentiable
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple:
        anchors, v2flat, queue, image, target, other_pos, per = ctx.saved_tensors
        inv_t, chunk = ctx.inv_t, ctx.chunk
        g_anchor = torch.zeros_like(anchors)  # (P, C)
        g_v2 = torch.zeros_like(v2flat)  # (B*K2, C)
        for s in range(0, anchors.shape[0], chunk):
            sl = slice(s, s + chunk)
            a, g = anchors[sl] * inv_t, grad[sl, None]  # (c, C), (c, 1)
            rows = torch.arange(a.shape[0], device=a.device)
            logits = a @ v2flat.T  # (c, B*K2)
            lse = per[sl, None] + logits[rows, target[sl], None]  # (c, 1): loss + positive logit
            mask = _other_mask(image[sl], other_pos[sl], logits.shape[1])
            p = logits.sub_(lse).exp_().masked_fill_(mask, 0.0).mul_(g)  # g softmax
            p[rows, target[sl]] -= g[:, 0]  # (c, B*K2): g (softmax - onehot)
            g_rows = p @ v2flat  # (c, C)
            if queue is not None:
                g_rows += (a @ queue.T).sub_(lse).exp_().mul_(g) @ queue  # (c, Q) @ (Q, C)
            g_anchor[sl] = g_rows * inv_t
            g_v2 += p.T @ a
        return g_anchor, g_v2, None, None, None, None, None, None


def _checked(
    v1: torch.Tensor, v2: torch.Tensor, queue: torch.Tensor | None, pairs: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """dense_info_nce's tensors validated: views (B, K1, C) and (B, K2, C) of one dtype, the
    queue (Q, C) of that dtype (detached), pairs (P, 3) int64 on the views' device with every
    column in range."""
    v1, v2 = _validate.floating("v1", v1), _validate.floating("v2", v2)
    _validate.shape("v1", v1, "(B, K1, C) with B, K1, C >= 1", v1.ndim == 3 and v1.numel() > 0)
    B, K1, C = v1.shape
    _validate.shape(
        "v2",
        v2,
        f"({B}, K2, {C}) with K2 >= 1",
        v2.ndim == 3 and v2.shape[0] == B and v2.shape[1] >= 1 and v2.shape[2] == C,
    )
    K2 = v2.shape[1]
    if v2.dtype != v1.dtype:
        raise ValueError(f"v2 has dtype {v2.dtype}: expected {v1.dtype} (dtype of v1)")
    if queue is not None:
        queue = _validate.floating("queue", queue).detach()
        _validate.shape("queue", queue, f"(Q, {C})", queue.ndim == 2 and queue.shape[1] == C)
        if queue.dtype != v1.dtype:
            raise ValueError(f"queue has dtype {queue.dtype}: expected {v1.dtype} (dtype of v1)")
    pairs = _pairs_tensor(pairs, 3).to(v1.device)
    b, k1, k2 = pairs.unbind(1)  # (P,) each
    for name, col, high in (("b", b, B), ("k1", k1, K1), ("k2", k2, K2)):
        if bool((col < 0).any() or (col >= high).any()):
            raise ValueError(
                f"pairs column {name} spans [{int(col.min())}, {int(col.max())}]: "
                f"expected values in [0, {high})"
            )
    return v1, v2, queue, pairs


def dense_info_nce(
    v1: torch.Tensor,
    v2: torch.Tensor,
    pairs: torch.Tensor,
    temperature: float,
    queue: torch.Tensor | None = None,
    chunk: int = 1024,
    reduction: str = "mean",
    path: str = "auto",
) -> torch.Tensor:
    """Dense InfoNCE (docs/theory/statements.md C, L_local and L_dense).

    For a pair (b, k1, k2) with anchor a = v1[b, k1] and positive p = v2[b, k2]:
    L_local = -log( e^{<a,p>/T} / (e^{<a,p>/T} + sum_{u in M-} e^{<a,u>/T}) ), where the negatives
    M- are, following the source (K2 minus P(m)): every position of view 2 of image b that is not
    a positive of (b, k1), every position of view 2 of the other images of the batch, and every
    row of `queue` (detached: no gradient flows into the queue). With one positive per position
    this is "all of view 2 except k2". The contrast set has N = 1 + B*K2 - |P(m)| + Q members
    (`dense_contrast_size`).

    `reduction="mean"` follows L_dense = E_X[(1/|K+|) sum_{m in K+} L_local(m)]: the losses of a
    position's pairs are averaged, then positions are averaged within each image, then images
    (those with at least one pair) are averaged; all in float64. `"none"` returns per-pair losses
    in the row order of `pairs`.

    Paths, the same per-pair function `_pair_losses` and the same values (to rounding):
    "direct" builds all (P, B*K2 + Q) logits in one autograd pass (2 matmuls, memory O(P (B*K2 +
    Q)), like the naive MoCo-style loss); "chunked" processes `chunk` pairs at a time and
    recomputes each chunk's logits in a hand-written backward pass (3 matmuls, memory O(chunk
    (B*K2 + Q))). "auto" takes "direct" when P (B*K2 + Q) <= DIRECT_MAX_LOGITS, "chunked" above:
    on the CPU the chunked pass is as fast as the direct one from about that size up, and both
    beat the naive loss at every size measured (bench/dense_loss.py).

    Shape: v1 (B, K1, C), v2 (B, K2, C) unit-normalised, pairs (P, 3) int64 rows (b, k1, k2)
    without duplicates, queue (Q, C) -> () for "mean", (P,) for "none".
    """
    _validate.choice("reduction", reduction, REDUCTIONS)
    T = _validate.positive("temperature", temperature)
    _validate.at_least("chunk", chunk, 1)
    _validate.choice("path", path, PATHS)
    v1, v2, queue, pairs = _checked(v1, v2, queue, pairs)
    B, K1, C = v1.shape
    K2 = v2.shape[1]
    b, k1, k2 = pairs.unbind(1)  # (P,) each
    position = b * K1 + k1  # (P,) flat anchor position id
    if torch.unique(position * K2 + k2).numel() != pairs.shape[0]:
        raise ValueError("pairs has duplicate rows: expected each (b, k1, k2) at most once")

    is_pos = torch.zeros(B * K1, K2, dtype=torch.bool, device=v1.device)  # (B*K1, K2)
    is_pos[position, k2] = True
    v2flat = v2.reshape(B * K2, C)  # (B*K2, C)
    target = b * K2 + k2  # (P,)
    other_pos = is_pos[position]  # (P, K2): the positives of each pair's anchor ...
    other_pos[torch.arange(pairs.shape[0], device=v1.device), k2] = False  # ... but its own
    columns = B * K2 + (0 if queue is None else queue.shape[0])
    if path == "auto":
        path = "direct" if pairs.shape[0] * columns <= DIRECT_MAX_LOGITS else "chunked"
    args = (v1[b, k1], v2flat, queue, b, target, other_pos, 1.0 / T)
    if path == "direct":
        per_pair = _pair_losses(*args)  # (P,)
    else:
        per_pair = _ChunkedPairLosses.apply(*args, chunk)  # (P,)
    if reduction == "none":
        return per_pair
    per_position = _group_mean(per_pair.double(), position)  # (|K+| over the batch,)
    positions = torch.unique(position)  # sorted, aligned with per_position
    per_image = _group_mean(per_position, positions // K1)  # (images with a pair,)
    return per_image.mean().to(v1.dtype)


def _group_mean(values: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """Mean of `values` per distinct `group` id, ordered by sorted id.

    Shape: values (n,), group (n,) int64 -> (number of distinct ids,).
    """
    _, inverse = torch.unique(group, return_inverse=True)
    sums = values.new_zeros(int(inverse.max()) + 1).index_add(0, inverse, values)
    return sums / torch.bincount(inverse).to(values.dtype)


def dense_contrast_size(
    pairs: torch.Tensor, batch: int, k2: int, queue_size: int = 0
) -> torch.Tensor:
    """Contrast-set size N = 1 + batch*k2 - |P(m)| + queue_size of each pair of `dense_info_nce`.

    Shape: pairs (P, 3) int64 rows (b, k1, k2) -> (P,) int64.
    """
    pairs = _pairs_tensor(pairs, 3)
    _validate.at_least("batch", batch, 1)
    _validate.at_least("k2", k2, 1)
    _validate.at_least("queue_size", queue_size, 0)
    _, inverse, counts = torch.unique(pairs[:, :2], dim=0, return_inverse=True, return_counts=True)
    return 1 + batch * k2 + queue_size - counts[inverse]


def mi_lower_bound(local_loss: torch.Tensor, contrast_size: int | torch.Tensor) -> torch.Tensor:
    """InfoNCE bound on local mutual information: I(V1_m; V2_n) >= log N - L_local
    (docs/theory/statements.md C: in expectation over the pair and its negatives, drawn i.i.d. from
    the marginal).

    Shape: local_loss (*), contrast_size int or tensor broadcastable to (*) with N >= 1 -> (*).
    """
    local_loss = _validate.floating("local_loss", local_loss)
    if isinstance(contrast_size, torch.Tensor):
        if contrast_size.numel() == 0 or bool((contrast_size < 1).any()):
            raise ValueError(f"contrast_size={contrast_size!r}: expected values >= 1")
        log_n = torch.log(contrast_size.to(device=local_loss.device, dtype=local_loss.dtype))
        return log_n - local_loss
    return math.log(_validate.at_least("contrast_size", contrast_size, 1)) - local_loss


def _box(name: str, box: Sequence[float]) -> list[float]:
    ok = isinstance(box, Sequence) and len(box) == 4
    ok = ok and all(isinstance(x, (int, float)) and math.isfinite(x) for x in box)
    vals = [float(x) for x in box] if ok else []
    if not (ok and vals[2] > vals[0] and vals[3] > vals[1]):
        raise ValueError(f"{name}={box!r}: expected finite (x0, y0, x1, y1) with x1 > x0, y1 > y0")
    return vals


def _grid(name: str, grid: Sequence[int]) -> tuple[int, int]:
    ok = (
        isinstance(grid, Sequence)
        and len(grid) == 2
        and all(isinstance(g, int) and not isinstance(g, bool) and g >= 1 for g in grid)
    )
    if not ok:
        raise ValueError(f"{name}={grid!r}: expected (H, W) with integers >= 1")
    return grid[0], grid[1]


def geometric_correspondence(
    box1: Sequence[float],
    box2: Sequence[float],
    grid1: Sequence[int],
    grid2: Sequence[int],
    flip1: bool = False,
    flip2: bool = False,
) -> torch.Tensor:
    """Correspondence Pi from crop geometry (docs/theory/statements.md C): pairs (k1, k2) of
    flattened grid cells.

    A crop with box (x0, y0, x1, y1) in original-image coordinates and grid (H, W) splits its box
    into H x W cells; the cell at image row r, image column j covers the half-open rectangle
    [x0 + j w, x0 + (j+1) w) x [y0 + r h, y0 + (r+1) h), w = (x1-x0)/W, h = (y1-y0)/H, so the
    cells tile the box without overlap. A horizontally flipped view shows image column j at grid
    column W-1-j. Its grid index is k = r W + column (row-major). The pair (k1, k2) is in Pi when
    the centre of cell k1 lies in the region of cell k2; each k1 has at most one k2. Computed in
    float64 on the CPU.

    Shape: -> (P, 2) int64, sorted by k1.
    """
    bx1, bx2 = _box("box1", box1), _box("box2", box2)
    (h1, w1), (h2, w2) = _grid("grid1", grid1), _grid("grid2", grid2)
    rows, cols = torch.meshgrid(torch.arange(h1), torch.arange(w1), indexing="ij")  # (H1, W1)
    k1 = (rows * w1 + cols).flatten()  # (H1*W1,)
    img_col = (w1 - 1 - cols if flip1 else cols).flatten().double()

    def cell2(j: torch.Tensor, lo1: float, hi1: float, n1: int, lo2: float, hi2: float, n2: int):
        # cell of [lo2, hi2) / n2 holding the centre lo1 + (j + 1/2)(hi1 - lo1)/n1, as ONE division
        # of (for integer boxes) exact integers: a centre on a cell edge is never rounded below it
        num = (2 * n1 * (lo1 - lo2) + (2 * j + 1) * (hi1 - lo1)) * n2
        return torch.floor(num / (2 * n1 * (hi2 - lo2))).long()

    col2 = cell2(img_col, bx1[0], bx1[2], w1, bx2[0], bx2[2], w2)  # (H1*W1,)
    row2 = cell2(rows.flatten().double(), bx1[1], bx1[3], h1, bx2[1], bx2[3], h2)
    inside = (col2 >= 0) & (col2 < w2) & (row2 >= 0) & (row2 < h2)
    if flip2:
        col2 = w2 - 1 - col2
    return torch.stack([k1[inside], (row2 * w2 + col2)[inside]], dim=1)


def argmax_correspondence(f1: torch.Tensor, f2: torch.Tensor) -> torch.Tensor:
    """DenseCL correspondence: for each k1, k2 = argmax_k cos(f1[k1], f2[k]) (first on ties).

    Shape: f1 (K1, C), f2 (K2, C) -> (K1, 2) rows (k1, k2);
    batched f1 (B, K1, C), f2 (B, K2, C) -> (B*K1, 3) rows (b, k1, k2), as `dense_info_nce` takes.
    """
    f1, f2 = _validate.floating("f1", f1), _validate.floating("f2", f2)
    _validate.shape("f1", f1, "(K1, C) or (B, K1, C)", f1.ndim in (2, 3) and f1.numel() > 0)
    _validate.shape(
        "f2",
        f2,
        f"f1's shape {tuple(f1.shape)} with K1 replaced by any K2 >= 1",
        f2.ndim == f1.ndim
        and f2.shape[:-2] == f1.shape[:-2]
        and f2.shape[-1] == f1.shape[-1]
        and f2.shape[-2] >= 1,
    )
    with torch.no_grad():
        sim = F.normalize(f1, dim=-1) @ F.normalize(f2, dim=-1).transpose(-1, -2)  # (.., K1, K2)
        best = sim.argmax(dim=-1)  # (..., K1)
    k1 = torch.arange(f1.shape[-2], device=f1.device).expand_as(best)
    if f1.ndim == 2:
        return torch.stack([k1, best], dim=1)
    b = torch.arange(f1.shape[0], device=f1.device)[:, None].expand_as(best)
    return torch.stack([b, k1, best], dim=-1).reshape(-1, 3)


def batch_pairs(per_image: Sequence[torch.Tensor]) -> torch.Tensor:
    """Stack per-image (k1, k2) pairs into `dense_info_nce` rows (b, k1, k2), b = list index.

    Shape: per_image[b] (P_b, 2) int64 -> (sum_b P_b, 3) int64.
    """
    if len(per_image) == 0:
        raise ValueError("per_image=[]: expected at least one (P_b, 2) tensor")
    rows = []
    for i, p in enumerate(per_image):
        p = _validate.tensor(f"per_image[{i}]", p)
        _validate.shape(f"per_image[{i}]", p, "(P_b, 2)", p.ndim == 2 and p.shape[1] == 2)
        rows.append(torch.cat([torch.full_like(p[:, :1], i), p], dim=1))
    return torch.cat(rows)
