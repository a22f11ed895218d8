"""Argument checks shared by the kernels: errors name the argument, its value, the expectation."""

from __future__ import annotations

import math

import torch


def positive(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name}={value!r}: expected a finite number > 0")
    return float(value)


def open_unit(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and 0 < value < 1):
        raise ValueError(f"{name}={value!r}: expected a number in (0, 1)")
    return float(value)


def at_least(name: str, value: int, low: int) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
        raise ValueError(f"{name}={value!r}: expected an integer >= {low}")
    return value


def shape(name: str, tensor: torch.Tensor, expected: str, ok: bool) -> None:
    """Raise unless `ok`; `expected` describes the wanted shape, e.g. '(n, m)'."""
    if not ok:
        raise ValueError(f"{name} has shape {tuple(tensor.shape)}: expected {expected}")


def tensor(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} is {type(value).__name__}: expected a torch.Tensor")
    return value
