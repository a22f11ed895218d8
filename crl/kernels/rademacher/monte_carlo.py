"""Monte Carlo sign-suprema R_S(F) of the linear, spectral and finite classes
(docs/theory/statements.md A).

R_S(F) = E_eps sup_{f in F} sum_j sum_t eps_jt f_t(x_j): unnormalised, one-sided, no absolute
value and no 1/M (Saunshi et al. 2019, definition of R_S). Signs come from
crl.kernels.rademacher._signs, so estimates do not depend on chunking or device.

Precision of `linear`/`spectral`. Rows are folded in fixed blocks of BLOCK_ROWS rows aligned to the
global row index; within a block the matmul S^T Phi runs in the accumulator's dtype, across blocks
in float64. `linear` and `spectral` use float32 for float32 features: products of +-1 and float32
are exact and only the sum over at most 4096 rows rounds. Measured against the float64 path
(N <= 1e5, p <= 128): per-draw B ||S^T Phi||_F within 3e-7 relative, entries of S^T Phi within
1e-5 of their mean magnitude, far below the Monte Carlo error over draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from crl.kernels import _validate, stats
from crl.kernels.rademacher._signs import (
    BLOCK_ROWS,
    DRAWS_PER_WORD,
    _check_coords,
    _check_rows,
    _check_seed,
    _sign_table,
    _sign_width,
    _unpack,
    _words,
)

_SIGN_BUFFER_ELEMENTS = 1 << 23  # signs per sub-block matmul: a whole block at d * draws = 2048


@dataclass(frozen=True)
class SignEstimate:
    """Monte Carlo mean of a sign-supremum over `draws` independent sign draws.

    `ci` is the half-width of the 95% normal confidence interval, z * std / sqrt(draws), with
    `std` the sample standard deviation (ddof = 1) of the per-draw suprema.
    """

    value: float
    ci: float
    draws: int
    std: float


def _estimate(per_draw: torch.Tensor) -> SignEstimate:
    """Shape: per_draw (draws,) float64 suprema, one per sign draw."""
    draws = per_draw.numel()
    std = float(per_draw.std(correction=1))
    return SignEstimate(float(per_draw.mean()), stats.normal_half_width(std, draws), draws, std)


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
        self._width = width = _sign_width(draws)  # signs per (row, coordinate)
        self._sub_rows = max(1, min(BLOCK_ROWS, _SIGN_BUFFER_ELEMENTS // (d * width)))
        self._table = _sign_table(dtype, self.device)  # (256, 8)
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
        for coordinate t and draw k (width = `_sign_width(draws)`).
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
        _validate.float_tensor("features", features, 2, f"(rows, {self.p})")
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
        return products.view(self.p, self.d, self._width)[:, :, : self.draws].permute(2, 1, 0)

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
    values = _validate.float_tensor("values", values, 3, "(K, N, d)")
    _check_seed(seed)
    _validate.at_least("draws", draws, 2)
    classes, points, coords = values.shape
    _check_coords(coords)
    _check_rows(0, points)
    device = values.device
    blocks = -(-draws // DRAWS_PER_WORD)
    width = _sign_width(draws)
    table = _sign_table(torch.float64, device)
    scores = torch.zeros(width, classes, dtype=torch.float64, device=device)
    for start in range(0, points, BLOCK_ROWS):
        rows = min(BLOCK_ROWS, points - start)
        out = torch.empty(rows, coords, width, dtype=torch.float64, device=device)
        eps = _unpack(_words(seed, blocks, start, rows, coords, device), table, out)
        block = values[:, start : start + rows].to(torch.float64).reshape(classes, -1)
        scores += eps.view(rows * coords, -1).T @ block.T  # (width, K)
    return _estimate(scores[:draws].amax(dim=1))
