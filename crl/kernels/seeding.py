"""Seeds derived from keys, so results never depend on how work was split across workers."""

from __future__ import annotations

import hashlib

import torch

__all__ = [
    "derive_seed",
    "generator",
    "short_hash",
]


def derive_seed(*key: object) -> int:
    """A 63-bit seed that is a pure function of `key` (e.g. run seed, cell id, purpose)."""
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def generator(*key: object, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch.Generator seeded from `key`."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(*key))
    return gen


def short_hash(*key: object, length: int = 16) -> str:
    return hashlib.blake2b(repr(key).encode(), digest_size=16).hexdigest()[:length]
