"""Whether a derived output is current: a digest of the bytes it was derived from and of the source
of the code that derives it, kept in a stamp file next to the output. A rerun whose inputs and code
did not change skips the derivation (the tables of a run whose cells were all done, its report)."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from crl.steps import store
from crl.steps.atomic import write_bytes_atomic


def digest(files: Iterable[Path], *parts: str) -> str:
    """sha256 over `parts`, then the name and bytes of every file in name order."""
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(part.encode() + b"\0")
    for path in sorted(files, key=lambda p: p.name):
        hasher.update(path.name.encode() + b"\0" + path.read_bytes())
    return hasher.hexdigest()


def sources(*modules: ModuleType) -> str:
    """sha256 of the source files of `modules`: changes whenever their code does, committed or
    not (the git commit alone misses a working tree's edits)."""
    hasher = hashlib.sha256()
    for module in modules:
        hasher.update(Path(inspect.getfile(module)).read_bytes())
    return hasher.hexdigest()


def is_current(stamp: Path, value: str, *outputs: Path) -> bool:
    """Whether every output exists and `stamp` holds `value`."""
    return all(p.is_file() for p in outputs) and stamp.is_file() and stamp.read_text() == value


def forget(stamp: Path) -> None:
    """Remove the stamp before the outputs are rewritten: a derivation that stops half-way is
    never taken as current."""
    store.remove(stamp)


def record(stamp: Path, value: str, staging: Path) -> None:
    write_bytes_atomic(value.encode(), stamp, staging)
