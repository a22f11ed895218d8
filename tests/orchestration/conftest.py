"""Fixtures of the orchestration tests that start real clusters."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.services import two_node_ray_cluster


@pytest.fixture
def ray_cluster() -> Iterator[dict]:
    """A two-node Ray cluster on 127.0.0.1 (tests.services.two_node_ray_cluster)."""
    with two_node_ray_cluster() as cluster:
        yield cluster


@pytest.fixture
def replaceable_ray_cluster() -> Iterator[dict]:
    """A head with no CPUs and one 1-CPU worker node on 127.0.0.1: every task, actor and
    training worker runs on the worker node; `add_worker(name)` starts its replacement."""
    with two_node_ray_cluster(head_cpus=0) as cluster:
        yield cluster
