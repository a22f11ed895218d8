"""Sign-suprema: Monte Carlo and exact one-sided Rademacher complexities (THEORY.md, section A).

R_S(F) = E_eps sup_{f in F} sum_j sum_t eps_jt f_t(x_j): unnormalised, one-sided, no absolute
value and no 1/M (Saunshi et al. 2019, definition of R_S; seeds/000).

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

Precision of `linear`/`spectral`. Rows are folded in fixed blocks of BLOCK_ROWS rows aligned to the
global row index; within a block the matmul S^T Phi runs in the accumulator's dtype, across blocks
in float64. `linear` and `spectral` use float32 for float32 features: products of +-1 and float32
are exact and only the sum over at most 4096 rows rounds. Measured against the float64 path
(N <= 1e5, p <= 128): per-draw B ||S^T Phi||_F within 3e-7 relative, entries of S^T Phi within
1e-5 of their mean magnitude, far below the Monte Carlo error over draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from crl import _validate

BLOCK_ROWS = 4096
DRAWS_PER_WORD = 64
MAX_EXACT_SIGNS = 20
_COORD_BITS = 24
_ROW_BITS = 40
_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB
_SIGN_BUFFER_ELEMENTS = 1 << 21  # signs per sub-block matmul (8 MiB in float32): best measured
_LOW_BITS = 14  # exhaustive enumeration tabulates 2^14 patterns of the low signs once


@dataclass(frozen=True)
class SignEstimate:
    """Monte Carlo mean of a sign-supremum over `draws` independent sign draws.

    `ci` is the half-width of the 95% normal confidence interval, 1.96 * std / sqrt(draws), with
    `std` the sample standard deviation (ddof = 1) of the per-draw suprema.
    """

    value: float
    ci: float
    draws: int
    std: float


@dataclass(frozen=True)
class ContractionSides:
    """Both sides of the vector contraction inequality (THEORY.md S2), computed exactly.

    lhs = E_eps sup_v sum_i eps_i h_i(v_i); rhs_sqrt3 = sqrt(3) L E_eta sup_v sum_it eta_it v_it
    (the seed lemma); rhs_maurer = the same with sqrt(2) (Maurer 2016); ratio = lhs / (L E_eta ...).
    """

    lhs: float
    rhs_sqrt3: float
    rhs_maurer: float
    ratio: float


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


def _unpack(words: torch.Tensor, table: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Expand hash words into +-1 signs, writing into `out`.

    The bytes are read through a uint8 view of the words (little-endian: byte j holds bits
    8j..8j+7), one table row of 8 signs per byte.
    Shape: words (rows, coords, blocks) int64 contiguous; table (256, 8);
    out (rows, coords, 64 * blocks), out[r, t, 64b + k] = sign of draw 64b + k.
    """
    index = words.view(torch.uint8).view(-1).int()  # index: (rows * coords * blocks * 8,)
    torch.index_select(table, 0, index, out=out.view(-1, 8))
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


def _float_tensor(name: str, value: object, dims: int, expected: str) -> torch.Tensor:
    tensor = _validate.tensor(name, value)
    _validate.shape(name, tensor, expected, tensor.dim() == dims and tensor.numel() > 0)
    if not tensor.is_floating_point():
        raise ValueError(f"{name} has dtype {tensor.dtype}: expected a floating dtype")
    # min and max propagate NaN and +-inf: one pass, ~10x cheaper than isfinite(...).all()
    low, high = torch.aminmax(tensor)
    if not (math.isfinite(float(low)) and math.isfinite(float(high))):
        raise ValueError(f"{name} has non-finite entries: expected finite values")
    return tensor


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
    out = torch.empty(rows, coords, blocks * DRAWS_PER_WORD, dtype=dtype, device=device)
    _unpack(words, _sign_table(dtype, device), out)
    return out[:, :, :draws].permute(2, 0, 1)


def _estimate(per_draw: torch.Tensor) -> SignEstimate:
    """Shape: per_draw (draws,) float64 suprema, one per sign draw."""
    draws = per_draw.numel()
    std = float(per_draw.std(correction=1))
    return SignEstimate(float(per_draw.mean()), 1.96 * std / math.sqrt(draws), draws, std)


class LinearAccumulator:
    """Streaming G_k = S_k^T Phi for the class {x -> W phi(x): ||W||_F <= B}, W in R^{d x p}.

    Rows arrive in order through `update`; they are buffered and folded in fixed blocks of
    BLOCK_ROWS rows aligned to the global row index, blocks summed in order in float64, so any
    chunking of the same rows gives bit-identical G. `dtype` is the in-block matmul precision.
    """

    def __init__(
        self,
        d: int,
        p: int,
        draws: int,
        seed: int,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str = "cpu",
    ) -> None:
        self.d = _check_coords(d)
        self.p = _validate.at_least("p", p, 1)
        self.draws = _validate.at_least("draws", draws, 2)
        self.seed = _check_seed(seed)
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype={dtype!r}: expected torch.float32 or torch.float64")
        self.dtype = dtype
        self.device = torch.device(device)
        self._blocks = -(-draws // DRAWS_PER_WORD)
        columns = d * self._blocks * DRAWS_PER_WORD
        self._sub_rows = max(1, min(BLOCK_ROWS, _SIGN_BUFFER_ELEMENTS // columns))
        self._table = _sign_table(dtype, self.device)  # (256, 8)
        width = self._blocks * DRAWS_PER_WORD
        self._signs = torch.empty(
            self._sub_rows, d, width, dtype=dtype, device=self.device
        )  # sign sub-block: (sub_rows, d, width)
        self._phi = torch.empty(BLOCK_ROWS, p, dtype=dtype, device=self.device)  # block rows
        self._block = torch.empty(p, d * width, dtype=dtype, device=self.device)  # block sum
        self._products = torch.zeros(p, d * width, dtype=torch.float64, device=self.device)
        self._pending: list[torch.Tensor] = []  # rows not yet folded, each (rows_i, p)
        self._pending_rows = 0
        self._folded_rows = 0  # a multiple of BLOCK_ROWS

    @property
    def rows(self) -> int:
        """Number of rows received so far."""
        return self._folded_rows + self._pending_rows

    def _fold(self, phi: torch.Tensor, row_start: int) -> torch.Tensor:
        """Phi^T S of one block, summed in self.dtype into a reused buffer.

        The rows are first copied into a fixed buffer, so the matmul sees the same memory layout
        (and rounds the same way) whatever chunking delivered them. Phi^T S rather than S^T Phi:
        the faster operand layout for the BLAS kernel.
        Shape: phi (rows, p), rows <= BLOCK_ROWS; returns (p, d * width), column t * width + k
        for coordinate t and draw k (width = 64 * draw blocks).
        """
        rows = phi.shape[0]
        _check_rows(row_start, rows)
        phi = self._phi[:rows].copy_(phi)  # (rows, p)
        words = _words(self.seed, self._blocks, row_start, rows, self.d, self.device)
        for start in range(0, rows, self._sub_rows):
            sub = min(self._sub_rows, rows - start)
            signs_ = _unpack(words[start : start + sub], self._table, self._signs[:sub])
            # (p, d * width); beta = 0 on the first sub-block ignores the buffer's old contents
            self._block.addmm_(
                phi[start : start + sub].T, signs_.view(sub, -1), beta=int(start > 0)
            )
        return self._block

    def update(self, features: torch.Tensor) -> None:
        """Append the next rows. Shape: features (rows, p)."""
        features = _validate.tensor("features", features)
        _validate.shape(
            "features",
            features,
            f"(rows, {self.p})",
            features.dim() == 2 and features.shape[1] == self.p,
        )
        if features.shape[0] == 0:
            return
        _float_tensor("features", features, 2, f"(rows, {self.p})")
        x = features.detach().to(device=self.device, dtype=self.dtype)  # (rows, p)
        if self._pending_rows:
            take = min(BLOCK_ROWS - self._pending_rows, x.shape[0])
            self._pending.append(x[:take].clone())
            self._pending_rows += take
            x = x[take:]
            if self._pending_rows < BLOCK_ROWS:
                return
            self._products += self._fold(torch.cat(self._pending), self._folded_rows)
            self._folded_rows += BLOCK_ROWS
            self._pending, self._pending_rows = [], 0
        full = x.shape[0] - x.shape[0] % BLOCK_ROWS
        for start in range(0, full, BLOCK_ROWS):
            self._products += self._fold(x[start : start + BLOCK_ROWS], self._folded_rows)
            self._folded_rows += BLOCK_ROWS
        if full < x.shape[0]:
            self._pending.append(x[full:].clone())
            self._pending_rows = x.shape[0] - full

    def sign_products(self) -> torch.Tensor:
        """G_k = S_k^T Phi over all rows so far, the partial last block included (no state change).

        Shape: returns (draws, d, p) float64.
        """
        products = self._products
        if self._pending_rows:
            products = products + self._fold(torch.cat(self._pending), self._folded_rows)
        width = self._blocks * DRAWS_PER_WORD
        return products.view(self.p, self.d, width)[:, :, : self.draws].permute(2, 1, 0)

    def finish(self, B: float) -> SignEstimate:
        """E_S sup_{||W||_F <= B} <W, S^T Phi> = E_S B ||S^T Phi||_F (Cauchy-Schwarz)."""
        B = _validate.positive("B", B)
        return _estimate(B * torch.linalg.matrix_norm(self.sign_products(), ord="fro"))


def _accumulate(
    features: torch.Tensor, d: int, draws: int, seed: int, chunk_rows: int | None
) -> LinearAccumulator:
    """Feed `features` (N, p) through a LinearAccumulator, in chunks of chunk_rows if given.

    The in-block matmul is float32 for float32 features, float64 otherwise.
    """
    features = _validate.tensor("features", features)
    _validate.shape("features", features, "(N, p)", features.dim() == 2 and features.numel() > 0)
    dtype = torch.float32 if features.dtype == torch.float32 else torch.float64
    acc = LinearAccumulator(d, features.shape[1], draws, seed, dtype, features.device)
    step = (
        features.shape[0] if chunk_rows is None else _validate.at_least("chunk_rows", chunk_rows, 1)
    )
    for start in range(0, features.shape[0], step):
        acc.update(features[start : start + step])
    return acc


def linear(
    features: torch.Tensor,
    d: int,
    B: float,
    draws: int,
    seed: int,
    chunk_rows: int | None = None,
) -> SignEstimate:
    """Monte Carlo R_S of {x -> W phi(x): ||W||_F <= B}: E_S B ||S^T Phi||_F.

    sup_{||W||_F <= B} sum_j sum_t eps_jt (W phi_j)_t = sup <W, S^T Phi> = B ||S^T Phi||_F.
    Shape: features (N, p) = Phi; S (N, d) signs per draw.
    """
    B = _validate.positive("B", B)
    return _accumulate(features, d, draws, seed, chunk_rows).finish(B)


def spectral(features: torch.Tensor, d: int, B: float, draws: int, seed: int) -> SignEstimate:
    """Monte Carlo R_S of {x -> W phi(x): ||W||_op <= B}: E_S B ||S^T Phi||_* (nuclear norm).

    sup_{||W||_op <= B} <W, G> = B ||G||_* by duality of the operator and nuclear norms.
    Shape: features (N, p).
    """
    B = _validate.positive("B", B)
    products = _accumulate(features, d, draws, seed, None).sign_products()  # (draws, d, p)
    return _estimate(B * torch.linalg.svdvals(products).sum(dim=-1))


def finite(values: torch.Tensor, draws: int, seed: int) -> SignEstimate:
    """Monte Carlo R_S of a finite class: E_eps max_k sum_{j,t} eps_jt values[k, j, t].

    Shape: values (K, N, d), the outputs of K functions on N points; computed in float64.
    """
    values = _float_tensor("values", values, 3, "(K, N, d)")
    _check_seed(seed)
    _validate.at_least("draws", draws, 2)
    classes, points, coords = values.shape
    _check_coords(coords)
    _check_rows(0, points)
    device = values.device
    blocks = -(-draws // DRAWS_PER_WORD)
    table = _sign_table(torch.float64, device)
    scores = torch.zeros(blocks * DRAWS_PER_WORD, classes, dtype=torch.float64, device=device)
    for start in range(0, points, BLOCK_ROWS):
        rows = min(BLOCK_ROWS, points - start)
        out = torch.empty(rows, coords, blocks * DRAWS_PER_WORD, dtype=torch.float64, device=device)
        eps = _unpack(_words(seed, blocks, start, rows, coords, device), table, out)
        block = values[:, start : start + rows].to(torch.float64).reshape(classes, -1)
        scores += eps.view(rows * coords, -1).T @ block.T  # (64 * blocks, K)
    return _estimate(scores[:draws].amax(dim=1))


def _patterns(n: int, device: torch.device) -> torch.Tensor:
    """All sign patterns of {-1, +1}^n; pattern a has sign -1 where bit i of a is set.

    Shape: returns (2^n, n) float64.
    """
    codes = torch.arange(1 << n, device=device)[:, None] >> torch.arange(n, device=device)
    return (1 - 2 * (codes & 1)).to(torch.float64)


def _pattern_sums(atoms: torch.Tensor) -> Iterator[torch.Tensor]:
    """sum_i eps_i atoms[i] for every eps in {-1, +1}^n with eps_n = +1, in chunks.

    The other half are the negations. The sums over the low bits are tabulated once; each chunk
    adds the fixed contribution of its high bits. Shape: atoms (n, Q); yields (chunk, Q) float64.
    """
    n = atoms.shape[0]
    low = min(n - 1, _LOW_BITS)
    table = _patterns(low, atoms.device) @ atoms[:low]  # (2^low, Q)
    for high in range(1 << (n - 1 - low)):
        high_signs = [-1.0 if (high >> i) & 1 else 1.0 for i in range(n - 1 - low)] + [1.0]
        offset = torch.tensor(high_signs, dtype=torch.float64, device=atoms.device) @ atoms[low:]
        yield table + offset


def _check_exact(name: str, n: int) -> None:
    if n > MAX_EXACT_SIGNS:
        raise ValueError(f"{name}={n!r}: expected <= {MAX_EXACT_SIGNS} for exhaustive enumeration")


def exact_finite(values: torch.Tensor) -> float:
    """Exact R_S of a finite class by enumerating all 2^(N d) sign patterns.

    E_eps max_k sum_{j,t} eps_jt values[k, j, t]. Patterns are paired with their negations:
    max_k s_k + max_k (-s_k) = max_k s_k - min_k s_k >= 0 per pair, so the result is never
    negative and is exactly 0 when all K functions agree (e.g. K = 1).
    Shape: values (K, N, d), N * d <= 20.
    """
    values = _float_tensor("values", values, 3, "(K, N, d)")
    n = values.shape[1] * values.shape[2]
    _check_exact("N * d", n)
    atoms = values.to(torch.float64).reshape(values.shape[0], n).T  # (N d, K)
    total = sum(float((s.amax(dim=1) - s.amin(dim=1)).sum()) for s in _pattern_sums(atoms))
    return total / (1 << n)


def exact_linear(features: torch.Tensor, d: int, B: float) -> float:
    """Exact R_S of {x -> W phi(x): ||W||_F <= B}: mean of B ||S^T Phi||_F over all 2^(N d) S.

    S^T Phi = sum_{j,t} S_jt e_t phi_j^T; S and -S give the same norm, so half the patterns do.
    Shape: features (N, p), N * d <= 20.
    """
    features = _float_tensor("features", features, 2, "(N, p)")
    _check_coords(d)
    B = _validate.positive("B", B)
    n = features.shape[0] * d
    _check_exact("N * d", n)
    eye = torch.eye(d, dtype=torch.float64, device=features.device)
    phi = features.to(torch.float64)
    atoms = torch.einsum("tu,jq->jtuq", eye, phi).reshape(n, -1)  # (N d, d p)
    total = sum(float(s.norm(dim=1).sum()) for s in _pattern_sums(atoms))
    return B * total / (1 << (n - 1))


def vector_contraction(
    V: torch.Tensor, h: Callable[[torch.Tensor], torch.Tensor], L: float
) -> ContractionSides:
    """Both sides of the vector contraction inequality, exactly (THEORY.md S2; seeds/000).

    E_eps sup_v sum_i eps_i h_i(v_i) <= sqrt(3) L E_eta sup_v sum_{i,t} eta_it v_it for
    L-Lipschitz h_i; Maurer (2016) proves the constant sqrt(2). E_eta sup ... = 0 only when all v
    are equal; then lhs = 0 too and the ratio is reported as 0 (inf if lhs > 0, i.e. h is not a
    function of v).
    Shape: V (K, m, d), the finite set of v = (v_1..v_m); h maps (K, m, d) -> (K, m), applying h_i
    to v_i; m * d <= 20.
    """
    V = _float_tensor("V", V, 3, "(K, m, d)")
    L = _validate.positive("L", L)
    classes, m, coords = V.shape
    _check_exact("m * d", m * coords)
    hv = _validate.tensor("h(V)", h(V))
    _validate.shape("h(V)", hv, f"({classes}, {m})", hv.shape == (classes, m))
    lhs = exact_finite(hv.unsqueeze(-1))
    sup = L * exact_finite(V)
    if sup > 0:
        ratio = lhs / sup
    else:
        ratio = 0.0 if lhs == 0 else math.inf
    return ContractionSides(lhs, math.sqrt(3) * sup, math.sqrt(2) * sup, ratio)
