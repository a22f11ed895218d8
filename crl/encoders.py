"""Frozen backbones for the embed stage; one `device` argument, deterministic from a seed.

The learned part of every cell is a norm-bounded linear head on top (crl.train), so the
backbone is fixed: identity, a random-feature map, or a small randomly initialised CNN.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from crl.config import ConfigError, EncoderConfig
from crl.seeding import generator


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
        side = math.isqrt(in_dim)
        if side * side != in_dim:
            raise ConfigError(
                f"encoder.kind small_cnn: inputs of length {in_dim} are not square images"
            )
        self.side = side
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


def build(config: EncoderConfig, in_dim: int) -> nn.Module:
    if config.kind == "identity":
        return nn.Identity()
    if config.kind == "random_features":
        return RandomFeatures(in_dim, config.out_dim, config.seed)
    return SmallCNN(in_dim, config.out_dim, config.seed)


@torch.no_grad()
def embed(module: nn.Module, x: np.ndarray, batch_rows: int, device: str = "cpu") -> np.ndarray:
    """Apply `module` to rows of x in batches. Shape: x (N, in) -> (N, out) float32."""
    module = module.to(device).eval()
    out = [
        module(torch.from_numpy(x[i : i + batch_rows]).to(device)).float().cpu()
        for i in range(0, x.shape[0], batch_rows)
    ]
    return torch.cat(out).numpy() if out else np.zeros((0, 0), dtype=np.float32)
