"""crl.kernels.dense.crops: torchvision's crop rule transcribed as a loop, resampling checked on a
coordinate ramp, and the grid correspondence against an exhaustive integer-exact brute force
and against the pixels the rendered views actually show."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from crl.kernels.dense import crops

F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _torchvision_get_params(u, height, width, scale, ratio):
    """RandomResizedCrop.get_params (torchvision 0.19) with its uniforms taken from u[t]."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for ua, ur, ui, uj in u.tolist():
        target_area = area * (scale[0] + (scale[1] - scale[0]) * ua)
        aspect_ratio = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * ur)
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i = int(ui * (height - h + 1))
            j = int(uj * (width - w + 1))
            return i, j, h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w = width
        h = height
    return (height - h) // 2, (width - w) // 2, h, w


@pytest.mark.parametrize(
    "height,width,scale,ratio",
    [
        (64, 64, (0.2, 1.0), (0.75, 4 / 3)),
        (40, 90, (0.08, 1.0), (0.75, 4 / 3)),
        (90, 40, (0.5, 1.5), (0.75, 4 / 3)),
        (30, 30, (0.9, 3.0), (0.5, 2.0)),
    ],
)
def test_boxes_follow_torchvision_including_fallback(height, width, scale, ratio) -> None:
    u = torch.rand(400, crops.ATTEMPTS, 4, generator=_gen(0), dtype=F64)
    got = crops._boxes(u, height, width, scale, ratio)
    for row, ub in zip(got.tolist(), u, strict=True):
        i, j, h, w = _torchvision_get_params(ub, height, width, scale, ratio)
        assert row == [j, i, j + w, i + h]
    assert bool(
        (got[:, 0] >= 0).all() and (got[:, 2] <= width).all() and (got[:, 3] <= height).all()
    )


def test_crop_boxes_deterministic_and_in_range() -> None:
    a = crops.crop_boxes(200, 48, 64, _gen(3))
    assert torch.equal(a, crops.crop_boxes(200, 48, 64, _gen(3)))
    frac = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]) / (48 * 64)
    assert float(frac.min()) >= 0.2 - 0.05 and float(frac.max()) <= 1.0


def test_resampling_shows_the_box_on_a_coordinate_ramp() -> None:
    """Channels x + 0.5 and y + 0.5 at pixel centres: bilinear sampling returns the image
    coordinate of each view pixel centre exactly (away from the border clamp); the label of
    pixel (i, j) = i W + j tells which image pixel the view pixel centre falls in."""
    H, W, s, n = 40, 56, 16, 64
    ys, xs = torch.meshgrid(torch.arange(H, dtype=F64), torch.arange(W, dtype=F64), indexing="ij")
    ramp = torch.stack([xs + 0.5, ys + 0.5]).expand(n, 2, H, W).contiguous()
    ids = (torch.arange(H)[:, None] * W + torch.arange(W)[None, :]).expand(n, H, W).contiguous()
    views = crops.random_views(ramp, ids, s, _gen(5), scale=(0.05, 1.0))
    assert views.flips.any() and not views.flips.all()
    for b in range(n):
        x0, y0, x1, y1 = views.boxes[b].tolist()
        a = torch.arange(s, dtype=F64) + 0.5
        va = s - a if bool(views.flips[b]) else a
        want_x = x0 + va * (x1 - x0) / s  # (s,) image x of view columns
        want_y = y0 + a * (y1 - y0) / s
        half = 0.5 * max(x1 - x0, y1 - y0) / s  # supersampling reaches this far from the centre
        okx = (want_x - half >= 0.5) & (want_x + half <= W - 0.5)
        oky = (want_y - half >= 0.5) & (want_y + half <= H - 0.5)
        torch.testing.assert_close(views.images[b, 0][:, okx], want_x[okx].expand(s, -1))
        torch.testing.assert_close(views.images[b, 1][oky], want_y[oky, None].expand(-1, s))
        want_ids = torch.floor(want_y)[:, None] * W + torch.floor(want_x)[None, :]
        assert torch.equal(views.labels[b], want_ids.long())


def _cells_1d(lo, hi, n, flip, scale):
    """Image intervals [l, r) of the n cells of a view axis, in integers scaled by `scale`: view
    point a in [0, n) cell units maps to lo + a (hi - lo) / n, or lo + (n - a) (hi - lo) / n when
    flipped; the interval of cell c is the image of [c, c + 1), sorted."""
    ends = []
    for c in range(n):
        e = [(lo * n + (n - a if flip else a) * (hi - lo)) * (scale // n) for a in (c, c + 1)]
        ends.append(sorted(e))
    return np.array(ends, dtype=np.int64)  # (n, 2)


def _brute_force(box1, flip1, box2, flip2, g1, g2):
    """Exhaustive, integer-exact: the view-2 cell whose image rectangle contains the image point
    at each view-1 cell centre, and the exact overlap area of every (k1, k2) pair."""
    (h1, w1), (h2, w2) = g1, g2
    sx, sy = 2 * w1 * w2, 2 * h1 * h2  # every cell edge and centre is an integer on this scale
    x1 = _cells_1d(box1[0], box1[2], w1, flip1, sx)
    y1 = _cells_1d(box1[1], box1[3], h1, False, sy)
    x2 = _cells_1d(box2[0], box2[2], w2, flip2, sx)
    y2 = _cells_1d(box2[1], box2[3], h2, False, sy)
    rect1 = [(x1[c], y1[r]) for r in range(h1) for c in range(w1)]  # row-major k = r W + c
    rect2 = [(x2[c], y2[r]) for r in range(h2) for c in range(w2)]
    centre = np.full(len(rect1), -1)
    area = np.zeros((len(rect1), len(rect2)), dtype=np.int64)
    for k1, (ax, ay) in enumerate(rect1):
        cx, cy = ax.sum() // 2, ay.sum() // 2
        for k2, (bx, by) in enumerate(rect2):
            if bx[0] <= cx < bx[1] and by[0] <= cy < by[1]:
                assert centre[k1] == -1
                centre[k1] = k2
            ox = max(0, min(ax[1], bx[1]) - max(ax[0], bx[0]))
            oy = max(0, min(ay[1], by[1]) - max(ay[0], by[0]))
            area[k1, k2] = ox * oy
    cell_area = (x1[0, 1] - x1[0, 0]) * (y1[0, 1] - y1[0, 0])
    return centre, area, cell_area


@pytest.mark.parametrize("grids", [((7, 7), (7, 7)), ((4, 6), (7, 5))])
@pytest.mark.parametrize("flip_p", [0.0, 0.5, 1.0])
def test_grid_correspondence_against_brute_force(grids, flip_p: float) -> None:
    n, H, W = 60, 48, 64
    img = torch.zeros(n, 1, H, W)
    v1, v2 = crops.two_views(
        img, torch.zeros(n, H, W, dtype=torch.int64), 8, _gen(7), flip_p=flip_p
    )
    match = crops.grid_correspondence(v1, v2, *grids)
    matched = 0
    for b in range(n):
        box1 = [int(x) for x in v1.boxes[b].tolist()]
        box2 = [int(x) for x in v2.boxes[b].tolist()]
        centre, area, cell = _brute_force(box1, bool(v1.flips[b]), box2, bool(v2.flips[b]), *grids)
        assert match[b].tolist() == centre.tolist()
        for k1, k2 in enumerate(centre):
            if k2 >= 0:  # the centre's cell has maximal overlap (ties allowed)
                assert area[k1, k2] == area[k1].max()
                matched += 1
            else:  # at most half the cell lies inside view 2
                assert 2 * area[k1].sum() <= cell
    assert matched > 0


def test_correspondence_agrees_with_the_pixels_the_views_show() -> None:
    """Render views of an image of pixel ids; cell k1 of view 1 and its match in view 2 must show
    mostly the same image pixels, and the match must be among the cells sharing the most."""
    n, H, W, s, g = 40, 48, 48, 28, 7
    ids = (torch.arange(H)[:, None] * W + torch.arange(W)[None, :]).expand(n, H, W).contiguous()
    v1, v2 = crops.two_views(torch.zeros(n, 1, H, W), ids, s, _gen(11))
    match = crops.grid_correspondence(v1, v2, (g, g))
    c = s // g

    def cell_sets(labels: torch.Tensor) -> list[set[int]]:
        blocks = labels.reshape(g, c, g, c).permute(0, 2, 1, 3).reshape(g * g, c * c)
        return [set(row.tolist()) for row in blocks]

    for b in range(n):
        s1, s2 = cell_sets(v1.labels[b]), cell_sets(v2.labels[b])
        for k1, k2 in enumerate(match[b].tolist()):
            shared = [len(s1[k1] & t) for t in s2]
            if k2 >= 0:
                assert shared[k2] >= max(shared) - c  # discretisation: one row of view pixels
                assert shared[k2] > 0
            else:
                inside = len(s1[k1] & set().union(*s2))
                assert inside <= 0.5 * len(s1[k1]) + 2 * c


def test_correspondence_pairs() -> None:
    match = torch.tensor([[2, -1, 0], [-1, -1, -1], [-1, 1, 1]])
    got = crops.correspondence_pairs(match)
    assert got.tolist() == [[0, 0, 2], [0, 2, 0], [2, 1, 1], [2, 2, 1]]


_VIEWS = crops.Views(
    torch.zeros(1, 1, 4, 4),
    torch.zeros(1, 4, 4),
    torch.tensor([[0.0, 0, 4, 4]]),
    torch.zeros(1, dtype=torch.bool),
)

BAD = [
    (lambda: crops.crop_boxes(0, 8, 8, _gen(0)), "count"),
    (lambda: crops.crop_boxes(2, 8, 8, _gen(0), scale=(0.5, 0.2)), "scale"),
    (lambda: crops.crop_boxes(2, 8, 8, _gen(0), ratio=(0.0, 1.0)), "ratio"),
    (lambda: crops.crop_boxes(2, 8, 8, 0), "generator"),
    (
        lambda: crops.random_views(
            torch.zeros(2, 1, 8, 8), torch.zeros(2, 8, 8), 4, _gen(0), flip_p=2.0
        ),
        "flip_p",
    ),
    (
        lambda: crops.resized_crop(
            torch.zeros(2, 1, 8, 8),
            torch.zeros(2, 8, 9),
            torch.zeros(2, 4),
            torch.zeros(2, dtype=torch.bool),
            4,
        ),
        "labels",
    ),
    (
        lambda: crops.resized_crop(
            torch.zeros(2, 1, 8, 8),
            torch.zeros(2, 8, 8),
            torch.tensor([[0, 0, 4, 4], [3, 0, 3, 4.0]]),
            torch.zeros(2, dtype=torch.bool),
            4,
        ),
        "boxes",
    ),
    (
        lambda: crops.resized_crop(
            torch.zeros(2, 1, 8, 8),
            torch.zeros(2, 8, 8),
            torch.tensor([[0, 0, 4, 4.0]] * 2),
            torch.zeros(2),
            4,
        ),
        "flips",
    ),
    (
        lambda: crops.resized_crop(
            torch.zeros(2, 1, 8, 8),
            torch.zeros(2, 8, 8),
            torch.tensor([[0, 0, 4, 4.0]] * 2),
            torch.zeros(2, dtype=torch.bool),
            0,
        ),
        "out_size",
    ),
    (lambda: crops.correspondence_pairs(torch.zeros(3)), "match"),
    (lambda: crops.grid_correspondence(_VIEWS, _VIEWS, 7), "grid1"),
    (lambda: crops.grid_correspondence(_VIEWS, _VIEWS, (7, 7), (0, 7)), "grid2"),
]


@pytest.mark.parametrize("call,name", BAD)
def test_bad_inputs_raise_value_error_naming_argument(call, name: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call()
