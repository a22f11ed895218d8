"""Starting the private Ray on a loaded machine: Ray gives its node a fixed 30 s to register, and
a start that misses it is stopped (its processes, its folder) and made once more."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crl.orchestration import runtime
from tests.conftest import REPO


def test_only_the_descendants_that_name_the_folder_are_stopped(tmp_path: Path) -> None:
    marker = str(tmp_path / "crl-ray-failed")
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    named = subprocess.Popen([*sleep, marker])
    other = subprocess.Popen([*sleep, str(tmp_path / "elsewhere")])
    try:
        time.sleep(0.3)  # both are running python by now
        assert runtime.stop_processes_naming(marker) == 1
        assert named.wait(timeout=10) != 0
        assert other.poll() is None
    finally:
        for proc in (named, other):
            proc.kill()
            proc.wait()


PROBE = r"""
import json, os, sys
from crl.orchestration import runtime
runtime.ray_environment(None)  # before ray is imported, as crl's executor does
import ray

real, calls = ray.init, []

def late_once(*args, **kwargs):  # Ray's own failure, once, before the real start
    calls.append(kwargs["_temp_dir"])
    if len(calls) == 1:
        raise Exception("The current node timed out during startup. This could happen ...")
    return real(*args, **kwargs)

ray.init = late_once
where = runtime.ray_init(num_cpus=1)
first, second = (os.path.dirname(c) for c in calls)
print(json.dumps({"where": where, "first_gone": not os.path.exists(first),
                  "second_kept": os.path.exists(second), "starts": len(calls)}))
"""


@pytest.mark.slow
def test_a_start_that_misses_rays_deadline_is_made_again() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {
        "where": "local ray on 127.0.0.1 (1 CPUs)",
        "first_gone": True,
        "second_kept": True,
        "starts": 2,
    }
    assert "did not register within Ray's 30 s" in out.stderr
