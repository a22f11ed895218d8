"""Frozen backbones for the embed stage; one `device` argument, deterministic from a seed.

The learned part of every cell is a norm-bounded linear head on top (crl.kernels.learner), so the
backbone is fixed: identity, a random-feature map, a small randomly initialised CNN (images) or
MLP (vectors); the last two can be pretrained first (encoder.pretrain) and then frozen.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from crl.kernels.seeding import generator

__all__ = ["MLP", "RandomConv", "RandomFeatures", "SmallCNN", "build_encoder", "square_side"]


def square_side(in_dim: int) -> int:
    """The side of a square image flattened to `in_dim` pixels; ValueError if there is none."""
    side = math.isqrt(in_dim)
    if side * side != in_dim:
        raise ValueError(f"inputs of length {in_dim} are not square images")
    return side


class RandomFeatures(nn.Module):
    """phi(x) = relu(A x + b) / sqrt(out), A ~ N(0, 1/in), b ~ N(0, 1): a fixed random map."""

    def __init__(self, in_dim: int, out_dim: int, seed: int) -> None:
        super().__init__()
        gen = generator(seed, "random-features")
        self.register_buffer(
            "weight", torch.randn(out_dim, in_dim, generator=gen) / math.sqrt(in_dim)
        )
        self.register_buffer("bias", torch.randn(out_dim, generator=gen))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: N x in -> N x out
        return torch.relu(x @ self.weight.T + self.bias) / math.sqrt(self.weight.shape[0])


class SmallCNN(nn.Module):
    """Two 3x3 conv layers and a 2x2 pooled grid, randomly initialised and frozen.

    Inputs are square single-channel images given flattened: (N, side*side).
    """

    def __init__(self, in_dim: int, out_dim: int, seed: int) -> None:
        super().__init__()
        self.side = square_side(in_dim)
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.head = nn.Linear(32 * 4, out_dim)
        gen = generator(seed, "small-cnn")
        with torch.no_grad():
            for param in self.parameters():
                fan_in = param[0].numel() if param.dim() > 1 else param.numel()
                param.copy_(torch.randn(param.shape, generator=gen) / math.sqrt(fan_in))
        self.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: N x side^2 -> N x 1 x side x side -> N x out
        grid = x.reshape(-1, 1, self.side, self.side)
        hidden = torch.relu(self.conv2(torch.relu(self.conv1(grid))))
        return self.head(self.pool(hidden).flatten(1))


class MLP(nn.Module):
    """Two linear layers with a ReLU between, in -> out -> out, randomly initialised (N(0,
    1/fan in) weights and biases from `seed`) and frozen: the vector counterpart of SmallCNN.

    Shape: (N, in_dim) -> (N, out_dim).
    """

    def __init__(self, in_dim: int, out_dim: int, seed: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(in_dim, out_dim)
        self.out = nn.Linear(out_dim, out_dim)
        gen = generator(seed, "mlp")
        with torch.no_grad():
            for layer in (self.hidden, self.out):
                fan_in = layer.in_features
                layer.weight.copy_(
                    torch.randn(layer.weight.shape, generator=gen) / math.sqrt(fan_in)
                )
                layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen) / math.sqrt(fan_in))
        self.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))


def build_encoder(kind: str, in_dim: int, out_dim: int, seed: int) -> nn.Module:
    """The frozen encoder `kind` (encoder.kind) for inputs of `in_dim` values."""
    if kind == "identity":
        return nn.Identity()
    if kind == "random_features":
        return RandomFeatures(in_dim, out_dim, seed)
    if kind == "small_cnn":
        return SmallCNN(in_dim, out_dim, seed)
    if kind == "mlp":
        return MLP(in_dim, out_dim, seed)
    raise ValueError(f"encoder kind: unknown {kind!r}")


class RandomConv(nn.Module):
    """A frozen dense backbone: `layers` 3x3 conv + ReLU layers of `channels` (He-scaled random
    weights from `seed`, zero bias), the first `downsample` with stride 2; the feature map is
    average-pooled to a grid x grid grid of position features.

    Shape: images (N, c_in, S, S) -> (N, grid * grid, channels), positions row-major.
    """

    def __init__(
        self, in_channels: int, channels: int, layers: int, downsample: int, grid: int, seed: int
    ) -> None:
        super().__init__()
        gen = generator(seed, "random-conv")
        convs = []
        width = in_channels
        for layer in range(layers):
            conv = nn.Conv2d(width, channels, 3, stride=2 if layer < downsample else 1, padding=1)
            with torch.no_grad():
                fan_in = width * 9
                conv.weight.copy_(
                    torch.randn(conv.weight.shape, generator=gen) * math.sqrt(2.0 / fan_in)
                )
                conv.bias.zero_()
            convs.append(conv)
            width = channels
        self.convs = nn.ModuleList(convs)
        self.pool = nn.AdaptiveAvgPool2d(grid)
        self.requires_grad_(False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        hidden = images
        for conv in self.convs:
            hidden = torch.relu(conv(hidden))  # (N, channels, S', S')
        return self.pool(hidden).flatten(2).transpose(1, 2)  # (N, grid^2, channels)
