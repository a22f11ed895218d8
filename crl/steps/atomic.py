"""Atomic writes: a temporary file outside the table folder, then a rename into place.

The temporary file lives in `staging` (same file system, outside any table folder, so a Polars
scan of the folder never meets a half-written file) and is renamed over `path`. Under the mirror
of an object store (crl.steps.store), it is uploaded as the object of `path` before the rename.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from crl.steps.store import UMASK, publish


def _replace_atomically(write: Callable[[str], None], path: Path, staging: Path) -> None:
    """Call `write(tmp)` on a fresh temporary file in `staging`, then rename it to `path`, with
        the mode a plain `open` would give (mkstemp's files are private, 0600); a mirrored `path`'s
    object is written before the rename, so a local file exists only once its object does."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".tmp", dir=staging)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~UMASK)
        publish(Path(tmp), path)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_parquet_atomic(table: pa.Table, path: Path, staging: Path) -> None:
    """Write `table` to `path` so readers only ever see a complete file."""
    _replace_atomically(lambda tmp: pq.write_table(table, tmp), path, staging)


def write_bytes_atomic(data: bytes, path: Path, staging: Path) -> None:
    """Write `data` to `path` so readers only ever see a complete file."""
    _replace_atomically(lambda tmp: Path(tmp).write_bytes(data), path, staging)
