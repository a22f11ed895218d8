"""User backbones for the tests of `dense.backbone.kind: module` (named as
"tests.steps.dense.backbones:Class")."""

from __future__ import annotations

import sys

import torch
from torch import nn


class PoolNet(nn.Module):
    """A 1x1 convolution to `width` channels: a well-behaved user backbone."""

    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, width, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.conv(images)


class NanNet(PoolNet):
    """Outputs NaN features everywhere."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.conv(images) * float("nan")


class SmallMapNet(PoolNet):
    """A 2 x 2 feature map, whatever the image size."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return nn.functional.adaptive_avg_pool2d(self.conv(images), 2)


class ExitNet(nn.Module):
    """Exits the interpreter when built (user code raising SystemExit)."""

    def __init__(self) -> None:
        super().__init__()
        sys.exit(0)


def make_pool_net(width: int = 4) -> nn.Module:
    """A factory function: a callable that is not a class, refused."""
    return PoolNet(width)
