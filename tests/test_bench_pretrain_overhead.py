"""bench/pretrain_overhead.py: the line through two (epochs, wall) points gives the seconds per
epoch and the start-up."""

from __future__ import annotations

import pytest

from bench.pretrain_overhead import _fit


def test_the_fit_splits_wall_time_into_start_up_and_seconds_per_epoch() -> None:
    slope, intercept = _fit({8: 22.0, 2: 10.0})  # 6 s to start, 2 s an epoch
    assert slope == pytest.approx(2.0, abs=1e-12) and intercept == pytest.approx(6.0, abs=1e-12)
