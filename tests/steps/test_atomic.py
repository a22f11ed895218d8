"""crl.steps.atomic: a temporary file in staging, then a rename; nothing partial is seen."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crl.steps import atomic


def _table(values: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(values, pa.int64()), "name": [f"v{v}" for v in values]})


class _UnwritableTable:
    """Looks like a table (it has a schema) but pyarrow cannot write it."""

    schema = _table([1]).schema
    num_rows = 1


def test_write_parquet_atomic_creates_parent_folders_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tables" / "deep" / "cells.parquet"
    staging = tmp_path / ".staging"
    atomic.write_parquet_atomic(_table([3, 1, 2]), path, staging)
    assert path.is_file()
    assert pq.read_table(path).equals(_table([3, 1, 2]))
    assert staging.is_dir() and list(staging.iterdir()) == []
    # nothing but the file itself lands in the table folder
    assert sorted(p.name for p in path.parent.iterdir()) == ["cells.parquet"]


def test_write_parquet_atomic_overwrites(tmp_path: Path) -> None:
    path, staging = tmp_path / "t" / "x.parquet", tmp_path / ".staging"
    atomic.write_parquet_atomic(_table([1, 2, 3]), path, staging)
    atomic.write_parquet_atomic(_table([7]), path, staging)
    assert pq.read_table(path).equals(_table([7]))
    assert list(staging.iterdir()) == []
    assert [p.name for p in path.parent.iterdir()] == ["x.parquet"]


def test_write_bytes_atomic_creates_and_overwrites(tmp_path: Path) -> None:
    path, staging = tmp_path / "report" / "index.html", tmp_path / ".staging"
    atomic.write_bytes_atomic(b"first", path, staging)
    assert path.read_bytes() == b"first"
    atomic.write_bytes_atomic(b"", path, staging)
    assert path.read_bytes() == b""
    atomic.write_bytes_atomic(b"\x00\x01second", path, staging)
    assert path.read_bytes() == b"\x00\x01second"
    assert list(staging.iterdir()) == []


def test_a_table_that_cannot_be_written_leaves_no_file(tmp_path: Path) -> None:
    path, staging = tmp_path / "t" / "x.parquet", tmp_path / ".staging"
    with pytest.raises(TypeError):
        atomic.write_parquet_atomic(_UnwritableTable(), path, staging)  # type: ignore[arg-type]
    assert not path.exists()
    assert list(staging.iterdir()) == []
    assert list(path.parent.iterdir()) == []


def test_a_failed_overwrite_keeps_the_old_file(tmp_path: Path) -> None:
    path, staging = tmp_path / "t" / "x.parquet", tmp_path / ".staging"
    atomic.write_parquet_atomic(_table([1, 2]), path, staging)
    with pytest.raises(TypeError):
        atomic.write_parquet_atomic(_UnwritableTable(), path, staging)  # type: ignore[arg-type]
    assert pq.read_table(path).equals(_table([1, 2]))
    assert list(staging.iterdir()) == []


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()])
def test_a_write_that_raises_half_way_leaves_no_partial_file(
    tmp_path: Path, error: BaseException
) -> None:
    path, staging = tmp_path / "cells" / "abc.parquet", tmp_path / ".staging"
    seen: list[Path] = []

    def half_write(tmp: str) -> None:
        seen.append(Path(tmp))
        Path(tmp).write_bytes(b"PAR1 half a file")
        raise error

    with pytest.raises(type(error)):
        atomic._replace_atomically(half_write, path, staging)
    (tmp,) = seen
    assert tmp.parent == staging  # the temporary file lives outside the table folder
    assert tmp.name.startswith("abc.") and tmp.name.endswith(".tmp")
    assert not tmp.exists()
    assert not path.exists()
    assert list(staging.iterdir()) == []
    assert list(path.parent.iterdir()) == []


def test_a_failed_byte_write_keeps_the_previous_content(tmp_path: Path) -> None:
    path, staging = tmp_path / "config.json", tmp_path / ".staging"
    atomic.write_bytes_atomic(b'{"old": 1}', path, staging)

    def failing(tmp: str) -> None:
        Path(tmp).write_bytes(b'{"new"')
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        atomic._replace_atomically(failing, path, staging)
    assert path.read_bytes() == b'{"old": 1}'
    assert list(staging.iterdir()) == []


def test_written_files_get_the_mode_of_a_plain_open(tmp_path: Path) -> None:
    """The probe: report files (and every table) were written with mkstemp's private 0600."""
    plain = tmp_path / "plain"
    plain.write_bytes(b"x")
    expected = plain.stat().st_mode & 0o777
    atomic.write_bytes_atomic(b"<html>", tmp_path / "report" / "index.html", tmp_path / ".s")
    atomic.write_parquet_atomic(_table([1]), tmp_path / "tables" / "t.parquet", tmp_path / ".s")
    assert (tmp_path / "report" / "index.html").stat().st_mode & 0o777 == expected
    assert (tmp_path / "tables" / "t.parquet").stat().st_mode & 0o777 == expected
    assert expected == 0o666 & ~atomic.UMASK
