"""RayExecutor.map_workers on a private local Ray: a worker whose process ends is replaced and
its item computed by the new one; a worker whose constructor raises is an error at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

SCRIPT = """
import sys
from crl.orchestration.executor import RayExecutor
from tests.orchestration.worker_faults import {worker}
runner = RayExecutor(None)
runner.start()
try:
    print(runner.map_workers({worker}, (sys.argv[1],), [0, 1, 2, 3], label="w", progress=False))
except Exception as err:
    print("raised", type(err).__name__)
    print(err)
"""


def _run(worker: str, folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.format(worker=worker), str(folder)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_lost_worker_is_replaced_and_its_item_computed(tmp_path: Path) -> None:
    out = _run("DiesOnce", tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "died").exists()  # a worker process really ended
    assert out.stdout.splitlines()[-1] == "[0, 10, 20, 30]"  # in order, item 1 included
    assert out.stderr.count("crl: a worker of w was lost") == 1


def test_a_worker_that_cannot_start_is_an_error_not_a_loss(tmp_path: Path) -> None:
    out = _run("CannotStart", tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "raised ActorDiedError" in out.stdout and "this worker cannot start" in out.stdout
    assert "was lost" not in out.stderr
    built = list(tmp_path.glob("built-*"))  # the pool's first workers only: none replaced
    assert 1 <= len(built) <= 2
