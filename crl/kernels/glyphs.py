"""Procedural glyphs: grayscale images of a shape whose class survives every nuisance.

An image of side S holds one glyph of class k (a disc, ring, square, hollow square, triangle,
plus, pair of dots or bar) at a uniform position in the central half, a side of 0.4-0.8 of
S/2, any rotation and a contrast of 0.4-1 over a background level of 0-0.3, with `clutter`
soft blobs of random place, size and brightness and Gaussian pixel noise of `noise`, clamped to
[0, 1]. The class is the glyph's shape alone: position, rotation, scale, contrast, background,
clutter and noise carry nothing of it, so a random convolutional encoder, whose features are
dominated by where and how bright things are, separates the classes poorly, and an encoder that
learns invariance to those nuisances separates them well (docs/results.md measures both).

Rendering is pure: rows are drawn in chunks of CHUNK from generators keyed by (seed, chunk), so
the n rows are the same whatever else is drawn, and the first rows of a larger draw are the rows
of a smaller one.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from crl.kernels import _validate
from crl.kernels.seeding import generator

__all__ = ["GLYPHS", "render_glyphs"]

CHUNK = 4096  # rows drawn from one generator

GLYPHS = ("disc", "ring", "square", "hollow_square", "triangle", "plus", "dots", "bar")


def _distance(name: str, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A signed distance (negative inside, in glyph units) of the glyph `name` at the glyph
    coordinates (u, v): the glyph spans about [-1, 1]^2."""
    radius = torch.sqrt(u * u + v * v)
    box = torch.maximum(u.abs(), v.abs())
    if name == "disc":
        return radius - 1.0
    if name == "ring":
        return (radius - 0.8).abs() - 0.25
    if name == "square":
        return box - 0.8
    if name == "hollow_square":
        return (box - 0.65).abs() - 0.2
    if name == "triangle":
        sides = (-v - 0.5, 0.866 * u + 0.5 * v - 0.5, -0.866 * u + 0.5 * v - 0.5)
        return torch.maximum(torch.maximum(sides[0], sides[1]), sides[2])
    if name == "plus":
        across = torch.maximum(u.abs() - 0.9, v.abs() - 0.25)
        down = torch.maximum(u.abs() - 0.25, v.abs() - 0.9)
        return torch.minimum(across, down)
    if name == "dots":
        left = torch.sqrt((u + 0.55) ** 2 + v * v)
        right = torch.sqrt((u - 0.55) ** 2 + v * v)
        return torch.minimum(left, right) - 0.4
    if name == "bar":
        return torch.maximum(u.abs() - 0.95, v.abs() - 0.3)
    raise ValueError(f"unknown glyph {name!r}")


def _chunk(
    rows: int, side: int, classes: int, clutter: int, noise: float, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """`rows` glyph images (rows, side, side) float32 in [0, 1] and their classes (rows,)."""
    labels = torch.randint(0, classes, (rows,), generator=gen)
    centre = (torch.rand(rows, 2, generator=gen) * 0.5 + 0.25) * side
    scale = (torch.rand(rows, generator=gen) * 0.2 + 0.2) * side  # pixels per glyph unit
    angle = torch.rand(rows, generator=gen) * 2 * math.pi
    contrast = torch.rand(rows, generator=gen) * 0.6 + 0.4
    background = torch.rand(rows, generator=gen) * 0.3
    axis = torch.arange(side, dtype=torch.float32) + 0.5
    ys, xs = torch.meshgrid(axis, axis, indexing="ij")  # (side, side) pixel centres
    dx = xs - centre[:, 0, None, None]
    dy = ys - centre[:, 1, None, None]
    cos, sin = torch.cos(angle)[:, None, None], torch.sin(angle)[:, None, None]
    pixels = scale[:, None, None]
    u, v = (cos * dx + sin * dy) / pixels, (-sin * dx + cos * dy) / pixels
    distance = torch.empty(rows, side, side)
    for k in range(classes):
        chosen = labels == k
        distance[chosen] = _distance(GLYPHS[k], u[chosen], v[chosen])
    # a soft edge about one pixel wide: distance in glyph units times pixels per unit
    images = background[:, None, None] + contrast[:, None, None] * torch.sigmoid(
        -2.0 * distance * pixels
    )
    for _ in range(clutter):
        where = torch.rand(rows, 2, generator=gen) * side
        size = torch.rand(rows, generator=gen) + 0.5
        brightness = torch.rand(rows, generator=gen) * 0.5
        far = torch.sqrt((xs - where[:, 0, None, None]) ** 2 + (ys - where[:, 1, None, None]) ** 2)
        images = images + brightness[:, None, None] * torch.sigmoid(
            2.0 * (size[:, None, None] - far)
        )
    images = images + noise * torch.randn(images.shape, generator=gen)
    return images.clamp(0.0, 1.0), labels


def render_glyphs(
    rows: int, side: int, classes: int, clutter: int, noise: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """`rows` glyph images flattened, x (rows, side * side) float32 in [0, 1], and their classes
    (rows,) int32 in 0..classes-1 (GLYPHS' first `classes` shapes, uniform)."""
    _validate.at_least("rows", rows, 1)
    _validate.at_least("side", side, 4)
    if not 2 <= classes <= len(GLYPHS):
        raise ValueError(f"classes: {classes} is not in 2..{len(GLYPHS)}")
    _validate.at_least("clutter", clutter, 0)
    if not noise >= 0:
        raise ValueError(f"noise: {noise} is negative")
    images, labels = [], []
    for index, start in enumerate(range(0, rows, CHUNK)):
        gen = generator(seed, "glyphs", index)
        chunk_x, chunk_y = _chunk(CHUNK, side, classes, clutter, noise, gen)
        take = min(CHUNK, rows - start)
        images.append(chunk_x[:take].reshape(take, side * side))
        labels.append(chunk_y[:take])
    x = torch.cat(images).numpy().astype(np.float32)
    return x, torch.cat(labels).numpy().astype(np.int32)
