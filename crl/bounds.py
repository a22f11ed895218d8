"""Closed-form bound terms and rate fits.

The public alias of crl.kernels.bounds and crl.kernels.rates.
"""

from crl.kernels import bounds as _bounds
from crl.kernels import rates as _rates
from crl.kernels.bounds import *  # noqa: F403
from crl.kernels.rates import *  # noqa: F403

__all__ = [*_bounds.__all__, *_rates.__all__]
