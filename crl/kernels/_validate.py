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


def float_tensor(name: str, value: object, dims: int, expected: str) -> torch.Tensor:
    """A non-empty floating tensor of `dims` dimensions with finite entries."""
    tensor_ = tensor(name, value)
    shape(name, tensor_, expected, tensor_.dim() == dims and tensor_.numel() > 0)
    if not tensor_.is_floating_point():
        raise ValueError(f"{name} has dtype {tensor_.dtype}: expected a floating dtype")
    # min and max propagate NaN and +-inf: one pass, ~10x cheaper than isfinite(...).all()
    low, high = torch.aminmax(tensor_)
    if not (math.isfinite(float(low)) and math.isfinite(float(high))):
        raise ValueError(f"{name} has non-finite entries: expected finite values")
    return tensor_


def generator(value: object) -> torch.Generator:
    """`value` when it is a torch.Generator (randomness is always explicit)."""
    if not isinstance(value, torch.Generator):
        raise ValueError(f"generator is {type(value).__name__}: expected a torch.Generator")
    return value


def probabilities(name: str, p: torch.Tensor) -> None:
    """Finite nonnegative entries summing to 1 along the last axis."""
    if not (torch.isfinite(p).all() and (p >= 0).all()):
        raise ValueError(f"{name}={p!r}: expected finite nonnegative entries")
    if not torch.allclose(p.sum(-1), torch.ones((), dtype=p.dtype), atol=1e-9, rtol=0.0):
        raise ValueError(f"{name}={p!r}: expected entries summing to 1 along the last axis")


def floating(name: str, value: object) -> torch.Tensor:
    """Return `value` if it is a floating-point tensor, else raise ValueError naming `name`."""
    t = tensor(name, value)
    if not t.is_floating_point():
        raise ValueError(f"{name} has dtype {t.dtype}: expected a floating-point tensor")
    return t


def choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    """`value` when it is one of `allowed`."""
    if value not in allowed:
        raise ValueError(f"{name}={value!r}: expected one of {allowed}")
    return value


def nonnegative(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name}={value!r}: expected a finite number >= 0")
    return float(value)


def finite(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value)):
        raise ValueError(f"{name}={value!r}: expected a finite number")
    return float(value)
