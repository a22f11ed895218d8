"""Sign-suprema: Monte Carlo and exact one-sided Rademacher complexities
(docs/theory/statements.md, section A).

`_signs` is the counter-based sign stream, `monte_carlo` the streaming estimators of R_S(F) for
the linear, spectral and finite classes, `exact` enumeration of every sign pattern on tiny cases
and both sides of the vector contraction inequality.
"""

from crl.kernels.rademacher._signs import BLOCK_ROWS as BLOCK_ROWS
from crl.kernels.rademacher._signs import DRAWS_PER_WORD as DRAWS_PER_WORD
from crl.kernels.rademacher._signs import signs as signs
from crl.kernels.rademacher.exact import MAX_EXACT_SIGNS as MAX_EXACT_SIGNS
from crl.kernels.rademacher.exact import ContractionSides as ContractionSides
from crl.kernels.rademacher.exact import exact_finite as exact_finite
from crl.kernels.rademacher.exact import exact_linear as exact_linear
from crl.kernels.rademacher.exact import vector_contraction as vector_contraction
from crl.kernels.rademacher.monte_carlo import LinearAccumulator as LinearAccumulator
from crl.kernels.rademacher.monte_carlo import SignEstimate as SignEstimate
from crl.kernels.rademacher.monte_carlo import finite as finite
from crl.kernels.rademacher.monte_carlo import linear as linear
from crl.kernels.rademacher.monte_carlo import spectral as spectral

__all__ = [
    "BLOCK_ROWS",
    "DRAWS_PER_WORD",
    "MAX_EXACT_SIGNS",
    "ContractionSides",
    "LinearAccumulator",
    "SignEstimate",
    "exact_finite",
    "exact_linear",
    "finite",
    "linear",
    "signs",
    "spectral",
    "vector_contraction",
]
