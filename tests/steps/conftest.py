"""Steps run as executors run them: one torch thread per CPU of the task (cell_cpus = 1).

Two torch threads on two shared cores spin against each other and about double this folder's
time; each module runs with one thread and gets the previous count back afterwards.
"""

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
