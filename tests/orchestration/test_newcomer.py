"""The newcomer's commands, as typed: a config with pretraining run from a working directory
outside the repository with no --out at all, then every reading command on relative paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import crl
from tests.orchestration.test_pretrain_grid import TINY

pytestmark = pytest.mark.slow

# one Ray Train worker, two epochs: the pretraining stage's storage under a relative --out
CONFIG = {
    **TINY,
    "name": "newcomer",
    "dense": {
        **TINY["dense"],
        "pretrain": {**TINY["dense"]["pretrain"], "epochs": 2, "checkpoints": [0, 2], "workers": 1},
    },
}


def _ok(done, *command: str) -> str:
    assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-4000:])
    return done.stdout


def test_a_run_and_its_readers_from_a_folder_of_the_users_own(tmp_path: Path) -> None:
    work = tmp_path / "my project"
    work.mkdir()
    (work / "tiny.yaml").write_text(yaml.safe_dump(CONFIG))
    printed = _ok(crl("run", "tiny.yaml", cwd=work, prefect="temporary"), "run")
    runs = work / "runs"
    (run_dir,) = runs.iterdir()
    assert (run_dir / "tables" / "pretrain.parquet").is_file()
    assert (run_dir / "report" / "index.html").is_file()
    assert f"crl: tables  {run_dir / 'tables'}/" in printed
    assert json.loads((run_dir / "config.json").read_text())["config"]["name"] == "newcomer"
    assert not (Path.cwd() / "runs" / run_dir.name).exists()

    listed = _ok(crl("runs", "--format", "json", cwd=work), "runs")
    assert [r["run_id"] for r in json.loads(listed)] == [run_dir.name]
    assert json.loads(listed)[0]["status"] == "complete"
    counted = crl("query", "runs", "select count(*) as n from cells", "--format", "json", cwd=work)
    assert json.loads(_ok(counted, "query"))[0]["n"] == 2  # one cell per checkpoint
    relative = f"runs/{run_dir.name}"
    _ok(crl("report", relative, cwd=work), "report")
    _ok(crl("diff", relative, run_dir.name, "--format", "csv", cwd=work), "diff")

    below = work / "sub"
    below.mkdir()  # the same config typed from another folder: the same run, resumed
    again = crl("run", "../tiny.yaml", "--out", "../runs", cwd=below, prefect="temporary")
    assert "(2 already done, 0 computed, 0 failed)" in _ok(again, "rerun")
    assert [p.name for p in runs.iterdir()] == [run_dir.name]
