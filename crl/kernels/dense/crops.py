"""Two augmented views per image with their geometry, and the grid correspondence between them.

Conventions (shared with crl.kernels.dense.info_nce.geometric_correspondence):
* Image coordinates are continuous: pixel (row i, column j) of an H x W image is the unit square
  [j, j+1) x [i, i+1), its centre is (j + 0.5, i + 0.5), and the image is [0, W) x [0, H).
* A box (x0, y0, x1, y1) is a half-open rectangle [x0, x1) x [y0, y1) in image coordinates;
  random resized crops have integer corners, as torchvision's RandomResizedCrop.
* A view of side s shows its box stretched onto [0, s) x [0, s): view point (a, b) shows image
  point (x0 + a (x1 - x0) / s, y0 + b (y1 - y0) / s), or, when the view is flipped horizontally
  (after cropping), image point (x0 + (s - a) (x1 - x0) / s, ...). View pixel values are sampled
  at view pixel centres (bilinear, averaged over a supersampling grid when the crop is larger
  than the view, so that downscaling does not alias); label pixels take the label of the image
  pixel containing the view pixel centre (nearest).
* A feature grid of H x W cells over a view splits it into equal cells, row-major k = r W + c.
  Cell k1 of view 1 corresponds to the cell of view 2 whose region contains the image point at
  the centre of cell k1 (-1 when that point lies outside view 2's box): the centre convention of
  dense.geometric_correspondence. It is also a cell of maximal overlap with cell k1 (overlap is
  a product of two 1-D overlaps, each maximal at the cell containing the centre).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from crl.kernels import _validate
from crl.kernels.dense.info_nce import geometric_correspondence

__all__ = [
    "Views",
    "correspondence_pairs",
    "box_correspondence",
    "crop_boxes",
    "grid_correspondence",
    "random_views",
    "resized_crop",
    "two_views",
]

ATTEMPTS = 10  # torchvision's number of tries before the central-crop fallback


@dataclass(frozen=True)
class Views:
    """One augmented view per image.

    Shape: images (n, 3, s, s) float, labels (n, s, s) int64, boxes (n, 4) float64 rows
    (x0, y0, x1, y1) in image coordinates, flips (n,) bool (horizontal flip after the crop).
    """

    images: torch.Tensor
    labels: torch.Tensor
    boxes: torch.Tensor
    flips: torch.Tensor


def _range(name: str, value: tuple[float, float], low: float) -> tuple[float, float]:
    ok = isinstance(value, tuple) and len(value) == 2
    ok = ok and all(isinstance(x, (int, float)) and math.isfinite(x) for x in value)
    if not (ok and low < value[0] <= value[1]):
        raise ValueError(f"{name}={value!r}: expected (low, high) with {low} < low <= high")
    return float(value[0]), float(value[1])


def _boxes(
    u: torch.Tensor,
    height: int,
    width: int,
    scale: tuple[float, float],
    ratio: tuple[float, float],
) -> torch.Tensor:
    """torchvision's RandomResizedCrop.get_params driven by given uniforms, for all images at once.

    Attempt t of image b uses u[b, t] = (area, log-ratio, row offset, column offset) uniforms;
    the first attempt whose w x h crop fits is taken, else the central-crop fallback (the whole
    image, narrowed to the nearest allowed aspect ratio). Rounding is half-to-even, as Python's.
    Shape: u (n, attempts, 4) in [0, 1) -> (n, 4) float64 rows (x0, y0, x1, y1), integer valued.
    """
    u = u.double()
    area = height * width * (scale[0] + (scale[1] - scale[0]) * u[..., 0])  # (n, t)
    lr = (math.log(ratio[0]), math.log(ratio[1]))
    aspect = torch.exp(lr[0] + (lr[1] - lr[0]) * u[..., 1])
    w = torch.round(torch.sqrt(area * aspect))  # (n, t)
    h = torch.round(torch.sqrt(area / aspect))
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)  # (n, t)
    top = torch.floor(u[..., 2] * (height - h + 1))  # randint(0, height - h + 1)
    left = torch.floor(u[..., 3] * (width - w + 1))
    first = fits.to(torch.int64).argmax(dim=1, keepdim=True)  # (n, 1) first fitting attempt

    def pick(x: torch.Tensor) -> torch.Tensor:
        return x.gather(1, first).squeeze(1)  # (n,)

    in_ratio = width / height
    if in_ratio < ratio[0]:
        fw, fh = width, round(width / ratio[0])
    elif in_ratio > ratio[1]:
        fw, fh = round(height * ratio[1]), height
    else:
        fw, fh = width, height
    fall = torch.tensor([(width - fw) // 2, (height - fh) // 2, fw, fh], dtype=torch.float64)
    got = torch.stack([pick(left), pick(top), pick(w), pick(h)], dim=1)  # (n, 4) x, y, w, h
    got = torch.where(fits.any(dim=1, keepdim=True), got, fall.to(got.device))
    return torch.cat([got[:, :2], got[:, :2] + got[:, 2:]], dim=1)


def crop_boxes(
    count: int,
    height: int,
    width: int,
    generator: torch.Generator,
    scale: tuple[float, float] = (0.2, 1.0),
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
) -> torch.Tensor:
    """Random resized crop boxes as torchvision's RandomResizedCrop draws them (ATTEMPTS tries of
    area fraction U(scale) and log aspect ratio U(log ratio), then the central-crop fallback).

    The default scale (0.2, 1) is DenseCL's (MoCo v2 augmentation); torchvision's is (0.08, 1).
    Every image consumes the same number of draws. Shape: -> (count, 4) float64 rows
    (x0, y0, x1, y1) with integer values, on the generator's device.
    """
    count = _validate.at_least("count", count, 1)
    height = _validate.at_least("height", height, 1)
    width = _validate.at_least("width", width, 1)
    gen = _validate.generator(generator)
    u = torch.rand(count, ATTEMPTS, 4, generator=gen, device=gen.device, dtype=torch.float64)
    return _boxes(u, height, width, _range("scale", scale, 0.0), _range("ratio", ratio, 0.0))


def resized_crop(
    images: torch.Tensor,
    labels: torch.Tensor,
    boxes: torch.Tensor,
    flips: torch.Tensor,
    out_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Crop each image to its box, resize to out_size x out_size, flip where asked.

    Images: bilinear at view pixel centres (F.grid_sample, border padding), averaged over an
    f x f grid of sub-pixel centres per view pixel, f = ceil(largest box side / out_size), so
    a downscaled crop is box-filtered rather than aliased. Labels: nearest (the image pixel
    containing the view pixel centre).
    Shape: images (n, c, H, W) float, labels (n, H, W) int64, boxes (n, 4), flips (n,) bool
    -> views (n, c, out_size, out_size), view labels (n, out_size, out_size).
    """
    images = _validate.floating("images", images)
    _validate.shape("images", images, "(n, c, H, W)", images.ndim == 4 and images.numel() > 0)
    n, _, H, W = images.shape
    labels = _validate.tensor("labels", labels)
    _validate.shape("labels", labels, f"({n}, {H}, {W})", tuple(labels.shape) == (n, H, W))
    boxes = _validate.float_tensor("boxes", boxes, 2, f"({n}, 4)").to(images.device, torch.float64)
    _validate.shape("boxes", boxes, f"({n}, 4)", tuple(boxes.shape) == (n, 4))
    if bool((boxes[:, 2] <= boxes[:, 0]).any() or (boxes[:, 3] <= boxes[:, 1]).any()):
        raise ValueError("boxes has a row with x1 <= x0 or y1 <= y0: expected non-empty boxes")
    flips = _validate.tensor("flips", flips)
    _validate.shape(
        "flips", flips, f"({n},) bool", flips.shape == (n,) and flips.dtype == torch.bool
    )
    s = _validate.at_least("out_size", out_size, 1)
    f = max(1, math.ceil(float((boxes[:, 2:] - boxes[:, :2]).max()) / s))

    def positions(lo: torch.Tensor, hi: torch.Tensor, steps: int, flip: torch.Tensor | None):
        a = (torch.arange(steps, device=images.device, dtype=torch.float64) + 0.5) * (s / steps)
        a = a if flip is None else torch.where(flip[:, None], s - a, a)  # (n, steps) view coords
        return lo[:, None] + a * ((hi - lo) / s)[:, None]  # (n, steps) image coordinates

    xs = positions(boxes[:, 0], boxes[:, 2], s * f, flips)  # (n, s f)
    ys = positions(boxes[:, 1], boxes[:, 3], s * f, None)
    grid = torch.stack(
        [
            (2.0 * xs / W - 1.0)[:, None, :].expand(-1, s * f, -1),
            (2.0 * ys / H - 1.0)[:, :, None].expand(-1, -1, s * f),
        ],
        dim=-1,
    )  # (n, s f, s f, 2) as grid_sample wants: x then y, align_corners=False
    dense = F.grid_sample(
        images, grid.to(images.dtype), mode="bilinear", padding_mode="border", align_corners=False
    )  # (n, c, s f, s f)
    views = F.avg_pool2d(dense, f) if f > 1 else dense
    cols = torch.floor(positions(boxes[:, 0], boxes[:, 2], s, flips)).long().clamp(0, W - 1)
    rows = torch.floor(positions(boxes[:, 1], boxes[:, 3], s, None)).long().clamp(0, H - 1)
    batch = torch.arange(n, device=images.device)[:, None, None]
    return views, labels[batch, rows[:, :, None], cols[:, None, :]]


def random_views(
    images: torch.Tensor,
    labels: torch.Tensor,
    out_size: int,
    generator: torch.Generator,
    scale: tuple[float, float] = (0.2, 1.0),
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
    flip_p: float = 0.5,
) -> Views:
    """One random resized crop (crop_boxes) per image, flipped with probability flip_p.

    Shape: images (n, c, H, W), labels (n, H, W) -> Views of side out_size.
    """
    images = _validate.floating("images", images)
    _validate.shape("images", images, "(n, c, H, W)", images.ndim == 4 and images.numel() > 0)
    n, _, H, W = images.shape
    if not (isinstance(flip_p, (int, float)) and 0.0 <= flip_p <= 1.0):
        raise ValueError(f"flip_p={flip_p!r}: expected a number in [0, 1]")
    gen = _validate.generator(generator)
    boxes = crop_boxes(n, H, W, gen, scale, ratio)
    flips = torch.rand(n, generator=gen, device=gen.device, dtype=torch.float64) < flip_p
    boxes, flips = boxes.to(images.device), flips.to(images.device)
    views, view_labels = resized_crop(images, labels, boxes, flips, out_size)
    return Views(views, view_labels, boxes, flips)


def two_views(
    images: torch.Tensor,
    labels: torch.Tensor,
    out_size: int,
    generator: torch.Generator,
    scale: tuple[float, float] = (0.2, 1.0),
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
    flip_p: float = 0.5,
) -> tuple[Views, Views]:
    """Two independent `random_views` of every image (view 1 is drawn first)."""
    first = random_views(images, labels, out_size, generator, scale, ratio, flip_p)
    return first, random_views(images, labels, out_size, generator, scale, ratio, flip_p)


def grid_correspondence(
    view1: Views, view2: Views, grid1: tuple[int, int], grid2: tuple[int, int] | None = None
) -> torch.Tensor:
    """For every cell k1 of view 1's H1 x W1 grid, the cell k2 of view 2's grid that contains the
    image point at the centre of k1, or -1 (dense.geometric_correspondence per image).

    Shape: -> (n, H1*W1) int64 on the CPU.
    """
    grid2 = grid1 if grid2 is None else grid2
    for name, g in (("grid1", grid1), ("grid2", grid2)):
        ok = isinstance(g, tuple) and len(g) == 2
        if not (ok and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in g)):
            raise ValueError(f"{name}={g!r}: expected (H, W) with integers >= 1")
    if view2.boxes.shape[0] != view1.boxes.shape[0]:
        raise ValueError(
            f"view2 has {view2.boxes.shape[0]} images: expected {view1.boxes.shape[0]} (as view1)"
        )
    return box_correspondence(view1.boxes, view2.boxes, view1.flips, view2.flips, grid1, grid2)


def box_correspondence(
    boxes1: torch.Tensor,
    boxes2: torch.Tensor,
    flips1: torch.Tensor,
    flips2: torch.Tensor,
    grid1: tuple[int, int],
    grid2: tuple[int, int],
) -> torch.Tensor:
    """`grid_correspondence` from the recorded geometry alone (no pixels).

    Shape: boxes1, boxes2 (n, 4), flips1, flips2 (n,) bool -> (n, H1*W1) int64 on the CPU.
    """
    n = boxes1.shape[0]
    out = torch.full((n, grid1[0] * grid1[1]), -1, dtype=torch.int64)
    b1, b2 = boxes1.cpu().tolist(), boxes2.cpu().tolist()
    f1, f2 = flips1.cpu().tolist(), flips2.cpu().tolist()
    for i in range(n):
        pairs = geometric_correspondence(b1[i], b2[i], grid1, grid2, f1[i], f2[i])  # (P, 2)
        out[i, pairs[:, 0]] = pairs[:, 1]
    return out


def correspondence_pairs(match: torch.Tensor) -> torch.Tensor:
    """Rows (b, k1, k2) of the matched cells, as dense.dense_info_nce takes them.

    Shape: match (n, K1) int64 with -1 for no match -> (P, 3) int64, sorted by (b, k1).
    """
    match = _validate.tensor("match", match)
    ok = match.ndim == 2 and match.dtype == torch.int64
    _validate.shape("match", match, "(n, K1) int64", ok)
    b, k1 = torch.nonzero(match >= 0, as_tuple=True)
    return torch.stack([b, k1, match[b, k1]], dim=1)
