"""Random views of rows for contrastive pretraining of a global encoder (encoder.pretrain).

* `affine_view`: square images under a random rotation (any angle), scale (0.8-1.2), shift (up
  to an eighth of the side each way), gain (0.7-1.3, about the bottom of the pixel range) and
  offset (+-0.2 of the range), plus noise of 0.05 of the range, clamped to the range; the area
  a transform uncovers takes the image's median pixel. The nuisances of crl.kernels.glyphs, so
  that the views of one image share its class and little else. The photometric part matters:
  with gain about the middle of the range and an offset of +-0.1, the views share their
  brightness, NT-Xent matches them by it, and the pretrained encoder's probe on glyphs fell
  from 0.68 to 0.51 (docs/results.md).
* `mask_view`: vectors with each coordinate replaced, with probability `rate`, by the same
  coordinate of another row of the batch (SCARF, Bahri et al. 2022): a view law for feature
  vectors that needs no knowledge of what the coordinates mean.

Every draw comes from the generator passed in.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from crl.kernels import _validate

__all__ = ["affine_view", "mask_view"]


def affine_view(
    images: torch.Tensor, gen: torch.Generator, low: float, high: float
) -> torch.Tensor:
    """A random view of square images flattened, pixels in [low, high].

    Shape: images (N, side * side) -> (N, side * side) float32.
    """
    images = _validate.float_tensor("images", images, 2, "(N, side * side)").float()
    n, width = images.shape
    side = math.isqrt(width)
    if side * side != width:
        raise ValueError(f"images: rows of {width} values are not square images")
    if not high > low:
        raise ValueError(f"pixel range: high {high} is not above low {low}")
    grid = images.reshape(n, 1, side, side)
    angle = torch.rand(n, generator=gen) * 2 * math.pi
    scale = torch.rand(n, generator=gen) * 0.4 + 0.8
    shift = (torch.rand(n, 2, generator=gen) - 0.5) * 0.5  # in units of the half side
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    linear = torch.stack([torch.stack([cos, -sin], 1), torch.stack([sin, cos], 1)], 1)
    # output point p shows input point linear (p - shift): the centre moves by `shift` exactly
    offset = -(linear @ shift[:, :, None])  # (N, 2, 1)
    theta = torch.cat([linear, offset], dim=2)  # (N, 2, 3): output -> input coordinates
    sample = F.affine_grid(theta, list(grid.shape), align_corners=False)
    fill = grid.flatten(1).median(dim=1).values[:, None, None, None]
    view = F.grid_sample(grid - fill, sample, align_corners=False, padding_mode="zeros") + fill
    span = high - low
    gain = torch.rand(n, 1, 1, 1, generator=gen) * 0.6 + 0.7
    offset = (torch.rand(n, 1, 1, 1, generator=gen) - 0.5) * 0.4 * span
    view = low + (view - low) * gain + offset
    view = view + 0.05 * span * torch.randn(view.shape, generator=gen)
    return view.clamp(low, high).reshape(n, width)


def mask_view(rows: torch.Tensor, gen: torch.Generator, rate: float = 0.3) -> torch.Tensor:
    """A random view of vectors: each coordinate, with probability `rate`, takes the value of
    the same coordinate in a uniformly drawn row of the batch (possibly its own).

    Shape: rows (N, p) -> (N, p) float32.
    """
    rows = _validate.float_tensor("rows", rows, 2, "(N, p)").float()
    if not 0 <= rate < 1:
        raise ValueError(f"rate: {rate} is not in [0, 1)")
    n, p = rows.shape
    replace = torch.rand(n, p, generator=gen) < rate
    donors = torch.randint(0, n, (n, p), generator=gen)
    other = rows.gather(0, donors)
    return torch.where(replace, other, rows)
