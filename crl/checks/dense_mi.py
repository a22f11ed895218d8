"""Dense contrastive learning: the InfoNCE mutual-information bound
(docs/theory/statements.md C)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from crl.checks._instances import _F64, Row, _instance_generator, _randint, _row, _uniform
from crl.checks._registry import statement
from crl.kernels import stats
from crl.kernels.dense import info_nce as dense

if TYPE_CHECKING:
    from crl.checks import Constants


@statement("DENSE_mi_bound", instances=60)
def _dense_mi_bound(seed: int, instance: int, constants: Constants) -> list[Row]:
    """log N - L_dense <= I(V1; V2) with the optimal critic, N the contrast-set size.

    V1, V2 in R^k (k in [1, 4]) standard Gaussian with corr(V1_t, V2_t) = rho in [0.2, 0.9],
    coordinates independent: I = -(k/2) log(1 - rho^2). The optimal critic log p(v2|v1)/p(v2)
    equals, up to terms of the anchor alone (which cancel in InfoNCE),
    rho v1^T v2 / (1 - rho^2) - rho^2 ||v2||^2 / (2 (1 - rho^2)) = <[rho v1 / (1 - rho^2), 1],
    [v2, -rho^2 ||v2||^2 / (2 (1 - rho^2))]>, fed to `dense.dense_info_nce` at T = 1 as lifted
    features (not unit-normalised). A batch: B = 8 images x K positions (K in {2, 8, 32}),
    every position an iid pair, positive pairs (b, k, k), negatives the other B K - 1 view-2
    positions, N = B K (`dense.dense_contrast_size`). 64 independent batches; ci over batch
    means; lhs = `dense.mi_lower_bound` of their mean.
    """
    statement = "DENSE_mi_bound"
    gen, instance_seed = _instance_generator(seed, statement, instance)
    k, rho = _randint(gen, 1, 4), _uniform(gen, 0.2, 0.9)
    images, positions, batches = 8, (2, 8, 32)[instance % 3], 64
    info = -0.5 * k * math.log1p(-rho * rho)
    shape = (batches, images, positions, k)
    v1 = torch.randn(*shape, dtype=_F64, generator=gen)
    v2 = rho * v1 + math.sqrt(1 - rho * rho) * torch.randn(*shape, dtype=_F64, generator=gen)
    lift1 = torch.cat([rho / (1 - rho * rho) * v1, torch.ones(*shape[:-1], 1, dtype=_F64)], -1)
    quad = -rho * rho * v2.square().sum(-1, keepdim=True) / (2 * (1 - rho * rho))
    lift2 = torch.cat([v2, quad], -1)  # (batches, B, K, k + 1)
    b, pos = torch.meshgrid(torch.arange(images), torch.arange(positions), indexing="ij")
    pairs = torch.stack([b.flatten(), pos.flatten(), pos.flatten()], 1)  # (B K, 3)
    with torch.no_grad():
        per_batch = torch.stack(
            [dense.dense_info_nce(lift1[i], lift2[i], pairs, 1.0).to(_F64) for i in range(batches)]
        )  # (batches,)
    # every pair contrasts its positive with the other B K - 1 view-2 positions: N = B K
    contrast = int(dense.dense_contrast_size(pairs, images, positions)[0])
    loss, ci = stats.mean_ci(per_batch, constants.confidence)
    bound = dense.mi_lower_bound(torch.tensor(loss, dtype=_F64), contrast).item()
    params = {
        "k": k,
        "rho": rho,
        "images": images,
        "positions": positions,
        "N": contrast,
        "batches": batches,
        "mutual_information": info,
        "instance_seed": instance_seed,
    }
    return [
        _row(
            statement,
            instance,
            "monte_carlo",
            f"N={contrast}",
            params,
            bound,
            info,
            ci,
            note=f"L_dense={loss:.6g}",
        )
    ]
