"""crl.orchestration.executor without Ray: the local executor, Failures and make_executor."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from crl.core.errors import ConfigError
from crl.orchestration.executor import (
    Failure,
    LocalExecutor,
    RayExecutor,
    call_step,
    make_executor,
)

# Steps must be module-level (picklable for Ray); the local executor runs the same ones.


def scale_step(item: int, context: dict) -> tuple[int, int]:
    """item * factor, and the torch threads the step saw."""
    return item * context["factor"], torch.get_num_threads()


def failing_step(item: int, context: dict) -> int:
    if item == 2:
        raise ValueError(f"bad item {item}")
    return item + context["factor"]


class Doubler:
    """A worker class: built once per worker, called per item."""

    built: list[tuple] = []

    def __init__(self, offset: int, label: str) -> None:
        Doubler.built.append((offset, label))
        self.offset, self.label = offset, label
        self.calls = 0

    def __call__(self, item: int) -> str:
        self.calls += 1
        return f"{self.label}:{2 * item + self.offset}:{self.calls}"


@pytest.fixture
def threads() -> Iterator[int]:
    """The torch threads before the test; restored after it."""
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


def test_where_says_where() -> None:
    local = LocalExecutor()
    local.start()
    assert "local executor" in local.where()


def test_a_private_ray_starts_with_the_first_item_only() -> None:
    runner = RayExecutor(None)
    runner.start()
    runner.check_cpus(1)  # against the CPUs the private Ray would offer, without starting it
    assert runner.map(scale_step, [], {"factor": 2}, label="none", progress=False) == []
    assert "not started" in runner.where()
    with pytest.raises(ConfigError, match="runtime.cell_cpus"):
        runner.check_cpus(10_000)


def test_map_runs_the_step_over_items_in_order() -> None:
    results = LocalExecutor().map(
        scale_step, [3, 1, 2, 0], {"factor": 10}, label="test", progress=False
    )
    assert [r[0] for r in results] == [30, 10, 20, 0]


def test_map_of_no_items() -> None:
    assert LocalExecutor().map(scale_step, [], {"factor": 1}, label="x", progress=False) == []


def test_map_turns_an_exception_into_a_failure(threads: int) -> None:
    results = LocalExecutor().map(
        failing_step, [0, 1, 2, 3], {"factor": 5}, label="test", progress=False
    )
    assert results[:2] == [5, 6] and results[3] == 8  # the other items complete
    failure = results[2]
    assert isinstance(failure, Failure)
    assert failure.item == 2
    assert failure.error == "ValueError: bad item 2"
    assert failure.traceback.startswith("Traceback (most recent call last)")
    assert "failing_step" in failure.traceback
    assert failure.traceback.rstrip().endswith("ValueError: bad item 2")
    assert torch.get_num_threads() == threads  # restored after a failure too


@pytest.mark.parametrize(("cpus", "expected"), [(3.0, 3), (1.0, 1), (0.5, 1), (2.7, 2)])
def test_map_sets_torch_threads_to_cpus_and_restores_them(
    threads: int, cpus: float, expected: int
) -> None:
    torch.set_num_threads(4)
    results = LocalExecutor().map(
        scale_step, [1, 2], {"factor": 1}, label="t", cpus=cpus, progress=False
    )
    assert [r[1] for r in results] == [expected, expected]
    assert torch.get_num_threads() == 4


def test_call_step_directly(threads: int) -> None:
    assert call_step(scale_step, 4, {"factor": 2}, 2) == (8, 2)
    assert torch.get_num_threads() == threads
    failure = call_step(failing_step, 2, {"factor": 0}, 1)
    assert isinstance(failure, Failure) and failure.error == "ValueError: bad item 2"


def test_call_step_lets_keyboard_interrupt_through(threads: int) -> None:
    def interrupted(item: int, context: None) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        call_step(interrupted, 0, None, 2)
    assert torch.get_num_threads() == threads


def test_map_reports_progress(capsys: pytest.CaptureFixture[str]) -> None:
    LocalExecutor().map(scale_step, [1, 2, 3], {"factor": 1}, label="cells", progress=True)
    err = capsys.readouterr().err  # not a terminal: a plain line per unit (3 units < 10 steps)
    assert err.splitlines()[-1].startswith("crl: cells 3/3 (100%)")
    assert [line.split()[2] for line in err.splitlines()] == ["1/3", "2/3", "3/3"]
    LocalExecutor().map(scale_step, [1, 2, 3], {"factor": 1}, label="quiet", progress=False)
    assert capsys.readouterr().err == ""


def test_map_workers_builds_the_worker_once_and_calls_it_per_item() -> None:
    Doubler.built.clear()
    results = LocalExecutor().map_workers(
        Doubler, (1, "w"), [5, 0, 2], label="embed", progress=False
    )
    assert results == ["w:11:1", "w:1:2", "w:5:3"]
    assert Doubler.built == [(1, "w")]


def test_map_workers_of_no_items_builds_nothing() -> None:
    Doubler.built.clear()
    assert LocalExecutor().map_workers(Doubler, (0, "w"), [], label="e", progress=False) == []
    assert Doubler.built == []


def test_make_executor() -> None:
    assert isinstance(make_executor("local"), LocalExecutor)
    ray = make_executor("ray", "ray://head:10001")
    assert isinstance(ray, RayExecutor) and ray.address == "ray://head:10001"
    assert make_executor("ray").address is None
    with pytest.raises(ValueError, match=r"executor='bogus': expected one of \('ray', 'local'\)"):
        make_executor("bogus")


def test_progress_line_and_tenths() -> None:
    from crl.orchestration.progress import Progress

    bar = Progress("cells", 200, enabled=False)
    for _ in range(20):
        bar.advance()
    assert bar.done == 20 and bar._on_a_tenth()
    bar.advance()
    assert not bar._on_a_tenth()
    assert bar.line().startswith("crl: cells 21/200 (10%)")


def test_local_cpus_reads_crl_ray_num_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from crl.core.errors import ConfigError
    from crl.orchestration.runtime import local_cpus

    monkeypatch.delenv("CRL_RAY_NUM_CPUS", raising=False)
    assert local_cpus() == (os.cpu_count() or 1)
    monkeypatch.setenv("CRL_RAY_NUM_CPUS", "1")
    assert local_cpus() == 1
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv("CRL_RAY_NUM_CPUS", bad)
        with pytest.raises(ConfigError, match="CRL_RAY_NUM_CPUS"):
            local_cpus()
