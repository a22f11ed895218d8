"""crl.kernels.seeding: seeds, generators and short hashes as pure functions of a key."""

from __future__ import annotations

import hashlib
import itertools

import pytest
import torch

from crl.kernels.seeding import derive_seed, generator, short_hash

KEYS = [
    (),
    (0,),
    (1,),
    ("0",),
    (0, 0),
    ((0, 0),),
    (0, "cell"),
    ("cell", 0),
    (0, "cell", "abc"),
    (0, "cell", "abd"),
    (1, "cell", "abc"),
    (0, "shard", "train", 0),
    (0, "shard", "train", 1),
    (0, "shard", "test", 0),
    (0.0,),
    (None,),
]


def test_derive_seed_is_a_pinned_pure_function_of_the_key() -> None:
    # pinned: a change here changes every shard, cell and sign stream of every run
    assert derive_seed(0, "cell", "abc") == 3576819810038878567
    assert derive_seed() == 5694367389426422167
    for key in KEYS:
        assert derive_seed(*key) == derive_seed(*key)
        digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
        assert derive_seed(*key) == int.from_bytes(digest, "little") & (2**63 - 1)


def test_derive_seed_is_63_bits() -> None:
    seeds = [derive_seed(i, "bits") for i in range(2000)]
    assert all(isinstance(s, int) and 0 <= s < 2**63 for s in seeds)
    assert max(seeds) > 2**62  # the top bit of the 63 is used
    for s in seeds[:50]:
        torch.Generator().manual_seed(s)  # every seed is accepted by torch


def test_distinct_keys_give_distinct_seeds() -> None:
    seeds = [derive_seed(*key) for key in KEYS]
    assert len(set(seeds)) == len(KEYS)
    grid = [derive_seed(s, c, p) for s, c, p in itertools.product(range(5), "abcde", ("x", "y"))]
    assert len(set(grid)) == len(grid)


def test_generator_is_reproducible() -> None:
    first = torch.randn(5, generator=generator(0, "cell", "abc"))
    second = torch.randn(5, generator=generator(0, "cell", "abc"))
    assert torch.equal(first, second)
    assert generator(3, "x").initial_seed() == derive_seed(3, "x")
    other = torch.randn(5, generator=generator(0, "cell", "abd"))
    assert not torch.equal(first, other)
    assert generator(1).device == torch.device("cpu")


def test_generator_streams_continue() -> None:
    gen = generator("stream")
    a, b = torch.rand(3, generator=gen), torch.rand(3, generator=gen)
    both = torch.rand(6, generator=generator("stream"))
    assert torch.equal(torch.cat([a, b]), both)


@pytest.mark.parametrize("length", [1, 8, 12, 16, 32])
def test_short_hash_length(length: int) -> None:
    value = short_hash("cfg", "scrl", "hinge", 4, 50, 0, length=length)
    assert len(value) == length
    assert all(c in "0123456789abcdef" for c in value)
    assert value == short_hash("cfg", "scrl", "hinge", 4, 50, 0, length=length)


def test_short_hash_default_and_prefixes() -> None:
    full = short_hash("x")
    assert full == "3b7757c66746fd51" and len(full) == 16
    assert short_hash("x", length=8) == full[:8]
    assert len(short_hash("x", length=100)) == 32  # capped at the 16-byte digest
    assert short_hash("cfg", 1) != short_hash("cfg", "1")
    assert short_hash("a", "b") != short_hash("ab")
