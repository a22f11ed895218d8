"""Dense contrastive learning: Dense InfoNCE, MI bound, correspondences, queue.

The public alias of crl.kernels.dense.info_nce and crl.kernels.dense.memory.
"""

from crl.kernels.dense import info_nce as _dense
from crl.kernels.dense import memory as _memory
from crl.kernels.dense.info_nce import *  # noqa: F403
from crl.kernels.dense.memory import *  # noqa: F403

__all__ = [*_dense.__all__, *_memory.__all__]
