"""Dense contrastive learning: Dense InfoNCE, MI bound, correspondences, queue.

The public alias of crl.kernels.dense and crl.kernels.memory.
"""

from crl.kernels import dense as _dense
from crl.kernels import memory as _memory
from crl.kernels.dense import *  # noqa: F403
from crl.kernels.memory import *  # noqa: F403

__all__ = [*_dense.__all__, *_memory.__all__]
