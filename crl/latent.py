"""Latent-class model and two-modality Gaussian: the public alias of crl.kernels.latent."""

from crl.kernels.latent import *  # noqa: F403
from crl.kernels.latent import __all__ as __all__
