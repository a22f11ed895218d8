"""Procedural images with per-pixel labels: a dense downstream task that needs no download.

Each image is a textured, weakly tinted background with a few coloured objects painted on top of
each other. Class c in 1..classes has a fixed shape, SHAPES[(c - 1) % 4], and a fixed mean hue,
(c - 1) / classes of the colour wheel; every object jitters its hue (within +-0.3 of the hue
spacing), saturation, brightness, size, position and rotation, and carries a brightness gradient
and per-pixel noise. Label 0 is the background; a pixel takes the class of the topmost object
covering its centre.

Why a per-pixel linear probe finds this non-trivial but learnable: objects are saturated and the
background is not, so "object or not" is nearly linear in colour; the class is carried by hue,
which is circular and therefore not linear in RGB, and by shape, which a pixel cannot see alone.
Features with a receptive field (a trained backbone) can use both.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from crl.kernels import _validate

__all__ = ["MAX_CLASSES", "SHAPES", "generate"]

SHAPES = ("disc", "square", "triangle", "cross")
MAX_CLASSES = 16  # hues closer than 1/16 of the wheel would be indistinguishable under jitter
HUE_JITTER = 0.3  # of the hue spacing 1/classes, either side
NOISE = 0.04  # per-pixel standard deviation of the texture noise, objects and background


def _hsv_to_rgb(h: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Shape: h, s, v (...) in [0, 1] -> (..., 3) RGB in [0, 1] (the standard hexcone map)."""
    k = torch.stack([(5.0 + 6.0 * h) % 6.0, (3.0 + 6.0 * h) % 6.0, (1.0 + 6.0 * h) % 6.0], -1)
    ramp = torch.clamp(torch.minimum(k, 4.0 - k), 0.0, 1.0)  # (..., 3)
    return v[..., None] * (1.0 - s[..., None] * ramp)


def _shape_masks(u: torch.Tensor, v: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Masks of the four shapes of circumradius r in rotated coordinates (u, v) around a centre.

    Shape: u, v (n, S, S), r (n, 1, 1) -> (n, 4, S, S) bool, in the order of SHAPES.
    """
    disc = u * u + v * v <= r * r
    square = torch.maximum(u.abs(), v.abs()) <= 0.8 * r
    # equilateral triangle: three half-planes at distance r / 2 (the inradius) from the centre
    sides = [
        u * math.cos(a) + v * math.sin(a) <= 0.5 * r
        for a in (math.pi / 2, math.pi / 2 + 2 * math.pi / 3, math.pi / 2 + 4 * math.pi / 3)
    ]
    triangle = sides[0] & sides[1] & sides[2]
    arm = 0.3 * r
    cross = ((u.abs() <= r) & (v.abs() <= arm)) | ((v.abs() <= r) & (u.abs() <= arm))
    return torch.stack([disc, square, triangle, cross], dim=1)


def _background(count: int, size: int, gen: torch.Generator) -> torch.Tensor:
    """Grey level in [0.3, 0.7], tint +-0.08 per channel, smooth blotches (4x4 noise upsampled,
    amplitude 0.12) and per-pixel noise. Shape: -> (count, 3, size, size)."""
    dev = gen.device
    grey = 0.3 + 0.4 * torch.rand(count, 1, 1, 1, generator=gen, device=dev)
    tint = 0.08 * (2.0 * torch.rand(count, 3, 1, 1, generator=gen, device=dev) - 1.0)
    coarse = torch.randn(count, 1, 4, 4, generator=gen, device=dev)
    blotch = F.interpolate(coarse, size=(size, size), mode="bicubic", align_corners=False)
    noise = NOISE * torch.randn(count, 3, size, size, generator=gen, device=dev)
    return grey + tint + 0.12 * blotch + noise


def generate(
    count: int,
    size: int,
    classes: int,
    generator: torch.Generator,
    objects: tuple[int, int] = (1, 4),
) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` images with between objects[0] and objects[1] objects each, and their labels.

    Objects have circumradius in [size/10, size/4] and centres anywhere in the image (they may be
    cut by the border); later objects occlude earlier ones. The number of random draws does not
    depend on their values, so the output is a function of the generator's state and the
    arguments only; everything is computed on the generator's device.

    Shape: -> images (count, 3, size, size) float32 in [0, 1], labels (count, size, size) int64
    with 0 = background and 1..classes the object classes.
    """
    count = _validate.at_least("count", count, 1)
    size = _validate.at_least("size", size, 4)
    classes = _validate.at_least("classes", classes, 1)
    if classes > MAX_CLASSES:
        raise ValueError(f"classes={classes!r}: expected an integer in [1, {MAX_CLASSES}]")
    gen = _validate.generator(generator)
    ok = (
        isinstance(objects, tuple)
        and len(objects) == 2
        and all(isinstance(k, int) and not isinstance(k, bool) for k in objects)
        and 0 <= objects[0] <= objects[1]
        and objects[1] >= 1
    )
    if not ok:
        raise ValueError(f"objects={objects!r}: expected (low, high) integers, 0 <= low <= high")
    dev = gen.device
    lo, hi = objects
    image = _background(count, size, gen)  # (n, 3, S, S) float32
    labels = torch.zeros(count, size, size, dtype=torch.int64, device=dev)
    howmany = torch.randint(lo, hi + 1, (count,), generator=gen, device=dev)  # (n,)
    centre = torch.arange(size, device=dev, dtype=torch.float32) + 0.5  # pixel centres
    ys, xs = centre[:, None], centre[None, :]  # (S, 1), (1, S)

    def draw(*shape: int) -> torch.Tensor:
        return torch.rand(count, *shape, generator=gen, device=dev)

    for slot in range(hi):
        cls = torch.randint(1, classes + 1, (count,), generator=gen, device=dev)  # (n,)
        cx, cy = (size * draw(1, 1) for _ in range(2))  # (n, 1, 1)
        r = size * (0.1 + 0.15 * draw(1, 1))
        angle = 2.0 * math.pi * draw(1, 1)
        hue = ((cls - 1).float() + HUE_JITTER * (2.0 * draw() - 1.0)) / classes % 1.0  # (n,)
        rgb = _hsv_to_rgb(hue, 0.6 + 0.4 * draw(), 0.55 + 0.45 * draw())  # (n, 3)
        noise = NOISE * torch.randn(count, 3, size, size, generator=gen, device=dev)

        dx, dy = xs - cx, ys - cy  # (n, S, S) offsets from the centre
        u = dx * torch.cos(angle) + dy * torch.sin(angle)
        v = -dx * torch.sin(angle) + dy * torch.cos(angle)
        masks = _shape_masks(u, v, r)  # (n, 4, S, S)
        shape_id = ((cls - 1) % len(SHAPES)).view(count, 1, 1, 1).expand(-1, 1, size, size)
        mask = masks.gather(1, shape_id).squeeze(1) & (slot < howmany).view(count, 1, 1)
        shading = 1.0 + 0.15 * u / r  # (n, S, S) brightness gradient across the object
        paint = rgb[:, :, None, None] * shading[:, None] + noise  # (n, 3, S, S)
        image = torch.where(mask[:, None], paint, image)
        labels = torch.where(mask, cls.view(count, 1, 1), labels)
    return image.clamp(0.0, 1.0), labels
