"""The checks of a config's dense section that can fail before any work starts."""

from __future__ import annotations

import torch

from crl.core.dense_config import DenseConfig
from crl.core.errors import ConfigError
from crl.steps.dense import image_data
from crl.steps.dense.embed import build_backbone
from crl.steps.family import machine_memory


def check_dense(dense: DenseConfig) -> None:
    """Split sizes against the grid and shards; the backbone builds and yields its grid."""
    sizes = image_data.split_sizes(dense)  # user images: read and validated here
    if max(dense.grid.n) > sizes["train"]:
        raise ConfigError(
            f"config field dense.grid.n: n={max(dense.grid.n)} is larger than the train split "
            f"({sizes['train']} images)"
        )
    if sizes["test"] < 2 or sizes["pool"] < 2:
        raise ConfigError(f"dense.images: test and pool need at least 2 images each ({sizes})")
    if dense.images.shards > min(sizes.values()):
        raise ConfigError(
            f"config field dense.images.shards: {dense.images.shards} shards, but a split has "
            f"only {min(sizes.values())} images"
        )
    if dense.pretrain is not None:
        images = image_data.pretrain_size(dense)
        if images < dense.pretrain.batch:
            field = "images" if dense.images.kind == "shapes" else "fraction"
            raise ConfigError(
                f"config field dense.pretrain.batch: {dense.pretrain.batch} is larger than the "
                f"pretraining split ({images} images; dense.pretrain.{field})"
            )
    channels = image_data.channels(dense)
    size = dense.views.size
    try:
        backbone = build_backbone(dense.backbone, channels)
        # two images as the embed step sees them: values in [0, 1], seeded
        images = torch.rand(2, channels, size, size, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            probe = backbone(images)
    except (ValueError, RuntimeError, TypeError) as err:
        raise ConfigError(f"config field dense.backbone: {str(err).splitlines()[0]}") from None
    if not torch.isfinite(probe).all():
        raise ConfigError(
            f"config field dense.backbone: {dense.backbone.module or dense.backbone.kind} gives "
            "non-finite features (NaN or inf) on a trial image"
        )
    grid = dense.backbone.grid
    if dense.backbone.kind == "module":
        with torch.no_grad():
            height, width = backbone.module(images).shape[-2:]
        if min(height, width) < grid:
            raise ConfigError(
                f"config field dense.backbone.grid: {grid} x {grid} cells from the {height} x "
                f"{width} feature map of {dense.backbone.module} would repeat features; use "
                f"grid <= {min(height, width)}"
            )
    if dense.pretrain is not None and dense.backbone.kind != "random_conv":
        raise ConfigError(
            f"config field dense.pretrain: only a backbone of kind random_conv is pretrained "
            f"(dense.backbone.kind is {dense.backbone.kind})"
        )
    _check_cell_memory(dense, int(probe.shape[1]), int(probe.shape[2]))
    if tuple(probe.shape[1:2]) != (grid * grid,):
        raise ConfigError(
            f"config field dense.backbone.grid: the backbone gives {tuple(probe.shape)}, "
            f"expected (2, {grid * grid}, C)"
        )
    if dense.backbone.kind == "random_conv":
        side = dense.views.size
        for _ in range(min(dense.backbone.downsample, dense.backbone.layers)):
            side = (side + 1) // 2
        if side < grid:
            raise ConfigError(
                f"config field dense.backbone.grid: {grid} x {grid} cells from a {side} x {side} "
                f"feature map (views.size {dense.views.size}, downsample "
                f"{dense.backbone.downsample}) would repeat features; use grid <= {side}"
            )


def _check_cell_memory(dense: DenseConfig, positions: int, channels: int) -> None:
    """Refuse a grid whose largest cell cannot hold its negatives' position features: n images
    with m external negatives of `positions` x `channels` float32 values each."""
    n, m = max(dense.grid.n), max(dense.grid.m)
    needed = n * m * positions * channels * 4
    total = machine_memory()
    if needed > total:
        raise ConfigError(
            f"config field dense.grid.m: a cell with n={n}, m={m} holds about "
            f"{needed / 2**30:.0f} GiB of negative features ({positions} positions x {channels} "
            f"channels each); this machine has {total / 2**30:.0f} GiB"
        )
