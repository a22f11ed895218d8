"""`--out s3://...`: a run whose home is an S3-compatible server on 127.0.0.1 (moto's server
mode), killed with kill -9 while its cells run on Ray, resumed on a machine with an empty mirror
(everything comes back from the store), equal to an uninterrupted local run; then read back by
`crl query`, `crl runs`, `crl diff` and `crl report` from yet another empty mirror."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from crl.core import config
from tests.conftest import crl, crl_killable
from tests.orchestration.test_bound_grid import TINY, write_config
from tests.orchestration.test_faults import _tables
from tests.services import s3_server

pytestmark = pytest.mark.slow


def _keys(uri: str) -> set[str]:
    filesystem, base = pafs.FileSystem.from_uri(uri)
    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    infos = filesystem.get_file_info(selector)
    return {i.path[len(base) + 1 :] for i in infos if i.type == pafs.FileType.File}


def test_a_run_in_object_storage_resumes_after_kill_9_from_an_empty_mirror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path, TINY)
    run_id = config.load(path).run_id()
    local = ("--quiet", "--executor", "local")
    reference = crl("run", str(path), "--out", str(tmp_path / "reference"), *local)
    assert reference.returncode == 0, reference.stderr[-2000:]

    with s3_server(tmp_path) as aws:
        for name, value in aws.items():  # for this process's own reads of the store
            monkeypatch.setenv(name, value)
        uri = "s3://crl/runs"
        first = {**aws, "CRL_CACHE_DIR": str(tmp_path / "machine-a")}
        mirror = tmp_path / "machine-a" / "store" / "s3" / "crl" / "runs" / run_id
        driver = crl_killable("run", str(path), "--out", uri, "--quiet", env=first)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and len(list(mirror.glob("cells/*.parquet"))) < 8:
            assert driver.poll() is None, "the run finished before it could be killed"
            time.sleep(0.05)
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and every process it started
        driver.wait()
        stored = {k for k in _keys(uri) if k.startswith(f"{run_id}/cells/")}
        assert 8 <= len(stored) < 40
        # a local cell file exists only once its object does (Ray's workers wrote them)
        assert {f"{run_id}/cells/{p.name}" for p in mirror.glob("cells/*.parquet")} <= stored
        assert not any(k.startswith(f"{run_id}/tables/") for k in _keys(uri))

        fresh = {**aws, "CRL_CACHE_DIR": str(tmp_path / "machine-b")}  # nothing held locally
        rerun = crl("run", str(path), "--out", uri, *local, env=fresh)
        assert rerun.returncode == 0, rerun.stderr[-2000:]
        already = int(re.search(r"\((\d+) already done", rerun.stdout).group(1))
        assert len(stored) <= already < 40
        assert f"crl: stored  {uri}/{run_id}/" in rerun.stdout
        resumed = tmp_path / "machine-b" / "store" / "s3" / "crl" / "runs" / run_id
        got, expected = _tables(resumed), _tables(tmp_path / "reference" / run_id)
        for name in expected:
            assert got[name].equals(expected[name]), name
        keys = _keys(uri)
        assert {f"{run_id}/tables/{n}.parquet" for n in expected} <= keys
        assert len([k for k in keys if k.startswith(f"{run_id}/cells/")]) == 40
        assert not any(".staging" in k for k in keys)

        reader = {**aws, "CRL_CACHE_DIR": str(tmp_path / "machine-c")}
        count = crl("query", uri, "select count(*) as n from cells", "--format", "csv", env=reader)
        assert count.returncode == 0, count.stderr[-2000:]
        assert count.stdout.split() == ["n", "40"]
        reader_mirror = tmp_path / "machine-c" / "store" / "s3" / "crl" / "runs" / run_id
        assert not (reader_mirror / "cells").exists()  # a query reads the tables alone
        runs = crl("runs", "--out", uri, "--format", "csv", env=reader)
        assert runs.returncode == 0 and f"{run_id},grid" in runs.stdout, runs.stderr[-2000:]
        assert ",40,40,0,complete" in runs.stdout
        diff = crl("diff", str(tmp_path / "reference" / run_id), f"{uri}/{run_id}", env=reader)
        assert diff.returncode == 0, diff.stderr[-2000:]
        report = crl("report", run_id, "--out", uri, env=reader)
        assert report.returncode == 0, report.stderr[-2000:]
        assert f"crl: stored  {uri}/{run_id}/" in report.stdout
        assert not (reader_mirror / "data").exists()  # the reading commands take no data
        assert (reader_mirror / "cells").is_dir()  # `crl runs` counts the cells
        assert f"{run_id}/report/index.html" in _keys(uri)

        missing = crl("run", str(path), "--out", "s3://no-such-bucket/runs", *local, env=fresh)
        assert missing.returncode == 2
        assert missing.stderr.startswith("crl: error: --out s3://no-such-bucket/runs: cannot write")
