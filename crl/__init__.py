"""crl: generalization bounds for contrastive representation learning, evaluated at scale.

The kernels are submodules: `crl.losses`, `crl.dense`, `crl.rademacher`, `crl.bounds`,
`crl.latent`, `crl.metrics`, `crl.checks`. They load on first use (`import crl` stays light, so the
command line starts fast), e.g. `crl.losses.lse_risk(pos, neg, temperature)`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__version__ = "0.1.0"
KERNELS = ("losses", "dense", "rademacher", "bounds", "latent", "metrics", "checks")
__all__ = ["__version__", *KERNELS]


def __getattr__(name: str) -> ModuleType:
    if name in KERNELS:
        return importlib.import_module(f"crl.{name}")
    raise AttributeError(f"module 'crl' has no attribute {name!r}")
