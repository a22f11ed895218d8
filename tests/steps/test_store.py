"""The object store of a run folder (crl.steps.store) against a real S3-compatible server on
127.0.0.1 (moto's server mode): a write is an object before it is a local file, a mirror can be
deleted and pulled back, removal reaches the store, and a bad store is one line."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from crl.core.errors import ConfigError
from crl.steps import store
from crl.steps.atomic import write_bytes_atomic, write_parquet_atomic
from tests.services import s3_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with s3_server(tmp_path_factory.mktemp("s3")) as env:
        yield env


@pytest.fixture()
def s3(server: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh prefix of the bucket, this test's cache, and no mirror registered yet."""
    for name, value in server.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(store.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(store.ENV, raising=False)
    return f"s3://crl/{tmp_path.name}"


def _objects(uri: str) -> dict[str, bytes]:
    filesystem, base = pafs.FileSystem.from_uri(uri)
    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    return {
        info.path[len(base) + 1 :]: filesystem.open_input_stream(info.path).read()
        for info in filesystem.get_file_info(selector)
        if info.type == pafs.FileType.File
    }


def test_a_write_under_the_mirror_is_an_object(s3: str) -> None:
    root = store.open_store(s3)
    assert root == Path(os.environ[store.CACHE_ENV]).resolve() / "store" / "s3" / s3[5:]
    table = pa.table({"x": [1.0, 2.0]})
    write_parquet_atomic(table, root / "run" / "cells" / "a.parquet", root / "run" / ".staging")
    write_bytes_atomic(b"{}", root / "run" / "config.json", root / "run" / ".staging")
    objects = _objects(s3)
    assert set(objects) == {"run/cells/a.parquet", "run/config.json"}  # no probe, no staging
    assert objects["run/cells/a.parquet"] == (root / "run" / "cells" / "a.parquet").read_bytes()
    assert store.uri_of(root / "run") == f"{s3}/run"
    assert store.uri_of(Path("/elsewhere")) is None


def test_a_failed_upload_leaves_no_local_file(s3: str, tmp_path: Path) -> None:
    root = store.open_store(s3)
    os.environ[store.ENV] = os.environ[store.ENV].replace("s3://crl/", "s3://no-such-bucket/")
    target = root / "run" / "cells" / "a.parquet"
    with pytest.raises(OSError):
        write_parquet_atomic(pa.table({"x": [1]}), target, root / "run" / ".staging")
    assert not target.exists()
    assert list((root / "run" / ".staging").iterdir()) == []


def test_a_deleted_mirror_is_pulled_back_from_the_store(s3: str) -> None:
    root = store.open_store(s3)
    run = root / "run"
    for name in ("cells/a.parquet", "cells/b.parquet", "tables/summary.parquet"):
        write_parquet_atomic(pa.table({"name": [name]}), run / name, run / ".staging")
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*.parquet")}
    assert store.pull(run) == 0  # the mirror holds everything already
    for path in run.rglob("*.parquet"):
        path.unlink()
    assert store.pull(run, lambda parts: parts[0] == "cells") == 2
    assert store.pull(run) == 1
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*.parquet")} == before
    assert store.pull(run) == 0


def test_a_newer_object_replaces_the_local_copy(s3: str) -> None:
    """Another node rewrote a table (same size, later): the pull takes the new one."""
    root = store.open_store(s3)
    path = root / "run" / "tables" / "t.parquet"
    write_bytes_atomic(b"old-bytes", path, root / "run" / ".staging")
    os.utime(path, (time.time() - 60, time.time() - 60))  # written a minute ago here
    filesystem, base = pafs.FileSystem.from_uri(s3)
    with filesystem.open_output_stream(f"{base}/run/tables/t.parquet") as stream:
        stream.write(b"new-bytes")
    assert store.pull(root / "run") == 1
    assert path.read_bytes() == b"new-bytes"
    assert store.pull(root / "run") == 0


def test_fetch_and_remove(s3: str) -> None:
    root = store.open_store(s3)
    path = root / "run" / "data" / "part-0.parquet"
    write_parquet_atomic(pa.table({"x": [3]}), path, root / "run" / ".staging")
    path.unlink()
    assert pq.read_table(store.fetch(path)).column("x").to_pylist() == [3]
    store.remove(path)
    assert not path.exists() and _objects(s3) == {}
    assert not store.fetch(path).exists()  # neither here nor there: the caller computes it
    store.remove(path)  # removing what is gone is no error


def test_plain_folders_are_untouched(s3: str, tmp_path: Path) -> None:
    store.open_store(s3)
    local = tmp_path / "runs" / "run"
    write_bytes_atomic(b"x", local / "config.json", local / ".staging")
    assert store.pull(local) == 0 and store.uri_of(local) is None
    assert _objects(s3) == {}


def test_a_store_that_cannot_be_written_is_one_line(s3: str) -> None:
    with pytest.raises(ConfigError, match=r"^--out s3://no-such-bucket/x: cannot write there"):
        store.open_store("s3://no-such-bucket/x")
    with pytest.raises(ConfigError, match=r"name a bucket"):
        store.open_store("s3://")
    with pytest.raises(ConfigError, match=r"^--out nope://x/y: not a usable store"):
        store.open_store("nope://x/y")
    assert store.is_uri("s3://a/b") and not store.is_uri("runs") and not store.is_uri(Path("s3:/a"))
