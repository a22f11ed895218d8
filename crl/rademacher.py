"""Sign-suprema R_S(F), Monte Carlo and exact: the public alias of crl.kernels.rademacher."""

from crl.kernels.rademacher import *  # noqa: F403
from crl.kernels.rademacher import __all__ as __all__
