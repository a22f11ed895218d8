"""Contrastive loss kernels: the public alias of crl.kernels.losses."""

from crl.kernels.losses import *  # noqa: F403
from crl.kernels.losses import __all__ as __all__
