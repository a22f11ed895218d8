"""The sign stream of the sign-suprema: a sign is a pure function of (seed, draw, row, coordinate).


Sign stream. A sign is a pure function of (seed, draw, row, coordinate), so estimates do not depend
on how rows are chunked or on which device they run. With splitmix64's finaliser `mix`, all
arithmetic mod 2^64 and b = draw // 64:

    key(seed, b)             = mix(mix(seed) XOR b)
    word(seed, b, row, coord) = mix(key(seed, b) + GAMMA * (row * 2^24 + coord))
    sign(seed, draw, row, coord) = -1 if bit (draw mod 64) of word is set, else +1

(GAMMA = 0x9E3779B97F4A7C15, i.e. splitmix64 stream `key` at counter row * 2^24 + coord;
coord < 2^24, row < 2^40.) One hash gives the signs of 64 draws; a word is unpacked byte by byte
through a 256 x 8 table of +-1. The hash runs in torch int64 (wrapping multiply, logical shifts
by masking), so CPU and GPU give the same signs.
"""

from __future__ import annotations

import torch

from crl.kernels import _validate

BLOCK_ROWS = 4096  # rows folded per block, aligned to the global row index
DRAWS_PER_WORD = 64
_COORD_BITS = 24
_ROW_BITS = 40
_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB


def _signed(value: int) -> int:
    """The int64 with the same 64 bits as `value` mod 2^64."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def _mix_int(z: int) -> int:
    """splitmix64 finaliser on a Python int (mod 2^64)."""
    z = ((z ^ (z >> 30)) * _MUL1) & _MASK64
    z = ((z ^ (z >> 27)) * _MUL2) & _MASK64
    return z ^ (z >> 31)


def _mix_(z: torch.Tensor) -> torch.Tensor:
    """splitmix64 finaliser in place on int64: two's complement multiplication wraps mod 2^64,
    and masking the arithmetic right shift makes it logical."""
    z ^= (z >> 30) & ((1 << 34) - 1)
    z *= _signed(_MUL1)
    z ^= (z >> 27) & ((1 << 37) - 1)
    z *= _signed(_MUL2)
    z ^= (z >> 31) & ((1 << 33) - 1)
    return z


def _words(
    seed: int, blocks: int, row_start: int, rows: int, coords: int, device: torch.device
) -> torch.Tensor:
    """Hash words of draw blocks 0..blocks-1 for rows row_start.. and coordinates 0..coords-1.

    Shape: returns (rows, coords, blocks) int64; bit k of [r, t, b] is the sign bit of draw 64b+k.
    """
    row_part = torch.arange(row_start, row_start + rows, device=device)
    row_part *= _signed(_GAMMA << _COORD_BITS)  # rows: (rows,)
    coord_part = torch.arange(coords, device=device) * _signed(_GAMMA)  # (coords,)
    mixed_seed = _mix_int(seed)
    keys = torch.tensor(
        [_signed(_mix_int(mixed_seed ^ b)) for b in range(blocks)], device=device
    )  # keys: (blocks,)
    words = row_part[:, None, None] + coord_part[None, :, None] + keys  # (rows, coords, blocks)
    return _mix_(words)


def _sign_table(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Shape: (256, 8); entry [v, i] = -1 if bit i of byte v is set, else +1."""
    bits = (torch.arange(256, device=device)[:, None] >> torch.arange(8, device=device)) & 1
    return (1 - 2 * bits).to(dtype)


def _sign_width(draws: int) -> int:
    """Signs unpacked per (row, coordinate) for `draws` draws: whole bytes, 8 * ceil(draws / 8)."""
    return 8 * -(-draws // 8)


def _unpack(words: torch.Tensor, table: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Expand hash words into +-1 signs of the first `out.shape[-1]` draws, writing into `out`.

    The bytes are read through a uint8 view of the words (little-endian: byte j holds bits
    8j..8j+7, so byte 8b + j of a (row, coordinate) holds draws 64b + 8j..64b + 8j + 7), one
    table row of 8 signs per byte; only the bytes of the draws asked for are read.
    Shape: words (rows, coords, blocks) int64 contiguous; table (256, 8); out (rows, coords,
    width), width a multiple of 8 up to 64 * blocks; out[r, t, k] = sign of draw k.
    """
    rows, coords, blocks = words.shape
    width = out.shape[-1]
    if width % 8 or not 0 < width <= DRAWS_PER_WORD * blocks:
        raise ValueError(f"out width {width}: expected a multiple of 8 up to {64 * blocks}")
    index = words.view(torch.uint8).view(rows, coords, 8 * blocks)[:, :, : width // 8]
    torch.index_select(table, 0, index.reshape(-1).int(), out=out.view(-1, 8))
    return out


def _check_seed(seed: int) -> int:
    if not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed <= _MASK64):
        raise ValueError(f"seed={seed!r}: expected an integer in [0, 2^64)")
    return seed


def _check_coords(coords: int) -> int:
    _validate.at_least("d", coords, 1)
    if coords > 1 << _COORD_BITS:
        raise ValueError(f"d={coords!r}: expected an integer <= 2^{_COORD_BITS}")
    return coords


def _check_rows(row_start: int, rows: int) -> None:
    _validate.at_least("row_start", row_start, 0)
    _validate.at_least("rows", rows, 0)
    if row_start + rows > 1 << _ROW_BITS:
        raise ValueError(f"row_start + rows={row_start + rows!r}: expected <= 2^{_ROW_BITS}")


def signs(
    seed: int,
    draws: int,
    row_start: int,
    rows: int,
    coords: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """The +-1 signs eps[k, j, t] of draws k < draws, rows row_start + j, coordinates t.

    Shape: returns (draws, rows, coords); a pure function of (seed, draw, row, coordinate).
    """
    _check_seed(seed)
    _validate.at_least("draws", draws, 1)
    _check_rows(row_start, rows)
    _check_coords(coords)
    device = torch.device(device)
    blocks = -(-draws // DRAWS_PER_WORD)
    words = _words(seed, blocks, row_start, rows, coords, device)
    out = torch.empty(rows, coords, _sign_width(draws), dtype=dtype, device=device)
    _unpack(words, _sign_table(dtype, device), out)
    return out[:, :, :draws].permute(2, 0, 1)
