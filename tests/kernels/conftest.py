"""Kernel tests run on small tensors: one torch thread, as a cell runs. On a busy 2-core machine two
threads on small matmuls only spin (up to 50x slower)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
