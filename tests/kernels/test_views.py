"""crl.kernels.views: the random views of encoder.pretrain for images (affine) and vectors
(SCARF's masking)."""

from __future__ import annotations

import math

import pytest
import torch

from crl.kernels.views import affine_view, mask_view


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _disc(side: int, radius: float) -> torch.Tensor:
    axis = torch.arange(side, dtype=torch.float32) + 0.5 - side / 2
    ys, xs = torch.meshgrid(axis, axis, indexing="ij")
    return ((xs**2 + ys**2) < radius**2).float().reshape(1, side * side)


def test_affine_views_stay_in_range_and_are_drawn_from_the_generator() -> None:
    images = torch.rand(20, 64, generator=_gen(1)) * 2 - 1
    a = affine_view(images, _gen(7), -1.0, 1.0)
    torch.manual_seed(3)  # the global RNG plays no part
    b = affine_view(images, _gen(7), -1.0, 1.0)
    assert a.shape == (20, 64) and a.dtype == torch.float32
    assert torch.equal(a, b)
    assert a.min() >= -1.0 and a.max() <= 1.0
    assert not torch.equal(a, affine_view(images, _gen(8), -1.0, 1.0))


def test_an_affine_view_moves_a_glyph_but_keeps_about_its_ink() -> None:
    # a disc of radius 4 in a 24-pixel image: rotation leaves it, scale 0.8-1.2 changes its
    # area by at most 1.44x, the shift moves it by at most 3 pixels each way
    disc = _disc(24, 4.0).repeat(200, 1)
    views = affine_view(disc, _gen(2), 0.0, 1.0)
    ink = (views > 0.5).float().sum(dim=1)
    area = float(disc[0].sum())
    assert (ink > area / 1.44 / 1.6).all() and (ink < area * 1.44 * 1.6).all()
    assert (views != disc).any(dim=1).all()  # every view differs from the image
    grid = views.reshape(200, 24, 24) > 0.5
    axis = torch.arange(24, dtype=torch.float32) + 0.5 - 12
    weights = grid.float().sum((1, 2)).clamp(min=1)
    centre_x = (grid.float() * axis).sum((1, 2)) / weights
    assert centre_x.abs().max() <= 3.0 + 1.0  # at most an eighth of the side, plus the edge
    assert centre_x.std() > 0.5  # and it does move


def test_a_constant_image_gets_gain_offset_and_noise_only() -> None:
    flat = torch.full((2000, 16), 0.5)
    views = affine_view(flat, _gen(4), 0.0, 1.0)
    per_image = views.mean(dim=1)
    # 0.5 gain + offset: gain in 0.7-1.3 about the bottom of the range, offset in +-0.2, so the
    # mean is uniform-ish over 0.15..0.85 (noise 0.05 / 4 per image mean on top)
    assert per_image.min() > 0.15 - 0.05 and per_image.max() < 0.85 + 0.05
    assert per_image.min() < 0.2 and per_image.max() > 0.8  # the whole span is reached
    expected_var = 0.25 * 0.6**2 / 12 + 0.4**2 / 12  # independent gain and offset terms
    assert float(per_image.var()) == pytest.approx(expected_var, rel=0.1)
    assert float((views - per_image[:, None]).std()) == pytest.approx(0.05, rel=0.1)


def test_affine_views_refuse_non_square_rows_and_an_empty_range() -> None:
    with pytest.raises(ValueError, match="rows of 15 values are not square"):
        affine_view(torch.zeros(2, 15), _gen(), 0.0, 1.0)
    with pytest.raises(ValueError, match="high 0.0 is not above low 0.0"):
        affine_view(torch.zeros(2, 16), _gen(), 0.0, 0.0)


def test_mask_view_takes_each_coordinate_from_its_own_column() -> None:
    rows = torch.arange(40, dtype=torch.float32).reshape(8, 5) * 10 + torch.arange(5)
    view = mask_view(rows, _gen(0), rate=0.5)
    # every value is some row's value of the same column: value mod 10 is the column
    assert torch.equal(view % 10, torch.arange(5, dtype=torch.float32).expand(8, 5))
    assert torch.equal(mask_view(rows, _gen(0), rate=0.0), rows)
    assert torch.equal(view, mask_view(rows, _gen(0), rate=0.5))


def test_mask_view_replaces_the_rate_of_coordinates() -> None:
    rows = torch.randn(400, 50, generator=_gen(1))
    view = mask_view(rows, _gen(2), rate=0.3)
    changed = float((view != rows).float().mean())
    # replaced with probability 0.3, by its own row's value with probability 1/400
    expected = 0.3 * (1 - 1 / 400)
    assert changed == pytest.approx(expected, abs=4 * math.sqrt(expected * (1 - expected) / 20000))
    with pytest.raises(ValueError, match="rate: 1.0 is not in"):
        mask_view(rows, _gen(), rate=1.0)
