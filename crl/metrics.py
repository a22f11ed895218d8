"""Downstream metrics and confidence intervals.

The public alias of crl.kernels.metrics and crl.kernels.stats.
"""

from crl.kernels import metrics as _metrics
from crl.kernels import stats as _stats
from crl.kernels.metrics import *  # noqa: F403
from crl.kernels.stats import *  # noqa: F403

__all__ = [*_metrics.__all__, *_stats.__all__]
