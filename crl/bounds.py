"""Closed-form bound terms, certified per-cell bounds and rate fits.

The public alias of crl.kernels.bounds, certified, rates and saturation (m*(n)).
"""

from crl.kernels import bounds as _bounds
from crl.kernels import certified as _certified
from crl.kernels import rates as _rates
from crl.kernels import saturation as _saturation
from crl.kernels.bounds import *  # noqa: F403
from crl.kernels.certified import *  # noqa: F403
from crl.kernels.rates import *  # noqa: F403
from crl.kernels.saturation import *  # noqa: F403

__all__ = [*_bounds.__all__, *_certified.__all__, *_rates.__all__, *_saturation.__all__]
