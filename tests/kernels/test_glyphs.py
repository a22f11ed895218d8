"""crl.kernels.glyphs: procedural glyph images, pure and chunk-stable, each class its shape."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from crl.kernels import glyphs
from crl.kernels.glyphs import GLYPHS, render_glyphs


def test_rows_are_images_in_the_unit_range_with_every_class() -> None:
    x, y = render_glyphs(600, 12, 8, 3, 0.1, seed=0)
    assert x.shape == (600, 144) and x.dtype == np.float32
    assert y.shape == (600,) and y.dtype == np.int32
    assert x.min() >= 0.0 and x.max() <= 1.0
    counts = np.bincount(y, minlength=8)
    assert counts.sum() == 600 and counts.min() > 40  # uniform over 8 classes: 75 each


def test_rendering_is_pure_and_a_prefix_of_a_larger_draw() -> None:
    a = render_glyphs(10, 8, 4, 2, 0.1, seed=3)
    b = render_glyphs(10, 8, 4, 2, 0.1, seed=3)
    torch.manual_seed(1)  # the global RNG plays no part
    np.random.seed(1)
    c = render_glyphs(glyphs.CHUNK + 5, 8, 4, 2, 0.1, seed=3)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert np.array_equal(c[0][:10], a[0]) and np.array_equal(c[1][:10], a[1])
    assert not np.array_equal(render_glyphs(10, 8, 4, 2, 0.1, seed=4)[0], a[0])
    assert len(c[1]) == glyphs.CHUNK + 5


def _areas(name: str) -> float:
    """The area of a glyph in glyph units: the cells of a fine grid on [-1.5, 1.5]^2 whose
    centre its signed distance puts inside."""
    axis = (torch.arange(1200, dtype=torch.float64) + 0.5) / 400 - 1.5
    v, u = torch.meshgrid(axis, axis, indexing="ij")
    inside = glyphs._distance(name, u, v) < 0
    return float(inside.double().mean()) * 9.0


@pytest.mark.parametrize(
    ("name", "area"),
    [
        ("disc", math.pi),
        ("ring", math.pi * (1.05**2 - 0.55**2)),
        ("square", 1.6**2),
        ("hollow_square", 1.7**2 - 0.9**2),
        ("triangle", 3 * math.sqrt(3) * 0.5**2),  # equilateral, inradius 0.5
        ("plus", 2 * (1.8 * 0.5) - 0.5**2),
        ("dots", 2 * math.pi * 0.4**2),
        ("bar", 1.9 * 0.6),
    ],
)
def test_each_glyph_has_its_closed_form_area(name: str, area: float) -> None:
    assert _areas(name) == pytest.approx(area, rel=0.01)


def test_a_clean_glyph_is_its_shape_over_the_background() -> None:
    # no clutter, no noise: pixels lie between the background (<= 0.3) and background + contrast
    x, y = render_glyphs(400, 16, 8, 0, 0.0, seed=1)
    per_image = x.reshape(400, -1)
    low = per_image.min(axis=1)
    assert (low <= 0.3 + 1e-6).all()
    # the glyph is drawn: every image has pixels well above its background
    assert ((per_image.max(axis=1) - low) > 0.3).all()
    # the filled square covers more pixels than the bar, on average, at the same scales
    ink = (per_image - low[:, None]) > 0.2
    square, bar = GLYPHS.index("square"), GLYPHS.index("bar")
    assert ink[y == square].sum(1).mean() > 1.5 * ink[y == bar].sum(1).mean()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 8, 4, 0, 0.1), "rows"),
        ((5, 3, 4, 0, 0.1), "side"),
        ((5, 8, 9, 0, 0.1), "classes: 9 is not in 2..8"),
        ((5, 8, 1, 0, 0.1), "classes: 1"),
        ((5, 8, 4, -1, 0.1), "clutter"),
        ((5, 8, 4, 0, -0.1), "noise: -0.1 is negative"),
    ],
)
def test_bad_arguments_are_refused(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render_glyphs(*args, seed=0)
