"""Content fingerprints of the external inputs a config reads, part of the run's identity.

`input_fingerprints(config)` maps each input's config field to `sha256:<16 hex>` of its content:
`dataset.path` and `dense.images.path` (a user Parquet file, or every file of a folder, by
relative path), `dense.backbone.module` (the source file of the module that defines the
class), and the data file scikit-learn ships for the digits (`dataset.digits`,
`dense.images.digits`). `crl.core.config.load` stores them in `Config.inputs`, which the hash
covers: a changed input gives a new run folder and new cell ids, never the old files' results.

A file is read once, streamed in 1 MiB blocks; the digest is cached (in `$CRL_CACHE_DIR`,
default ~/.cache/crl, fingerprints.json) under its path, size, inode, mtime and ctime, so an
unchanged file is not read again. ctime cannot be set from user space: a content change with
the size and mtime restored still changes ctime, and the file is read again.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

from crl.core.errors import ConfigError

_BLOCK = 2**20
_PREFIX = "sha256:"


def cache_path() -> Path:
    """Where the fingerprint cache lives ($CRL_CACHE_DIR or ~/.cache/crl)."""
    root = os.environ.get("CRL_CACHE_DIR") or Path.home() / ".cache" / "crl"
    return Path(root) / "fingerprints.json"


def _stat_key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_ino}|{st.st_mtime_ns}|{st.st_ctime_ns}"


def _read_cache() -> dict[str, str]:
    try:
        cache = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def _write_cache(cache: dict[str, str]) -> None:
    """Best effort and atomic: a cache that cannot be written costs a reread next time."""
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".fingerprints-")
        with os.fdopen(fd, "w") as handle:
            json.dump(cache, handle)
        os.replace(tmp, path)
    except OSError:
        pass


def _digest_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def file_digest(path: Path, cache: dict[str, str]) -> str:
    """The file's sha256 (hex), from `cache` when its stat key is there (then updated)."""
    key = _stat_key(path)
    if key not in cache:
        cache[key] = _digest_file(path)
    return cache[key]


def path_fingerprint(field: str, path: str | Path, cache: dict[str, str]) -> str:
    """A file's digest, or a folder's: the digest of its files' relative paths and digests
    (hidden files left out). Raises ConfigError naming `field` when nothing is there."""
    path = Path(path)
    if path.is_file():
        return _PREFIX + file_digest(path, cache)[:16]
    if not path.is_dir():
        raise ConfigError(f"config field {field}: {path} does not exist")
    digest = hashlib.sha256()
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )
    for file in files:
        digest.update(f"{file.relative_to(path).as_posix()}\0{file_digest(file, cache)}\n".encode())
    return _PREFIX + digest.hexdigest()[:16]


def module_source(spec: str) -> Path | None:
    """The source file of the module named in 'package.module:Class', found on sys.path part
    by part (importlib.machinery.PathFinder), so that no package's code runs: a config's
    module is imported only after the checks that may refuse it. None when there is no such
    file (a built-in or missing module: the backbone's own checks say what is wrong)."""
    parts = spec.split(":", 1)[0].split(".")
    search: list[str] | None = None
    found = None
    for part in parts:
        found = importlib.machinery.PathFinder.find_spec(part, search)
        if found is None:
            return None
        search = list(found.submodule_search_locations or [])
    if found is None or not found.origin or not Path(found.origin).is_file():
        return None
    return Path(found.origin)


def module_fingerprint(spec: str, cache: dict[str, str]) -> str | None:
    """The module's source fingerprint; a built-in module's is the interpreter's version."""
    source = module_source(spec)
    if source is not None:
        return path_fingerprint("dense.backbone.module", source, cache)
    name = spec.split(":", 1)[0]
    if name in sys.builtin_module_names:
        return f"builtin:python-{platform.python_version()}"
    return None


def digits_file() -> Path:
    """The digits data file scikit-learn ships."""
    import sklearn.datasets

    return Path(sklearn.datasets.__file__).parent / "data" / "digits.csv.gz"


def input_fingerprints(config: object) -> dict[str, str] | None:
    """{config field: fingerprint} of every external input of `config` (a crl Config), or None
    when it reads none."""
    cache = _read_cache()
    before = dict(cache)
    found: dict[str, str] = {}
    dataset = getattr(config, "dataset", None)
    kind = getattr(dataset, "kind", None)
    if kind in ("parquet", "paired_parquet"):
        found["dataset.path"] = path_fingerprint("dataset.path", dataset.path, cache)
    elif kind == "digits":
        found["dataset.digits"] = path_fingerprint("dataset", digits_file(), cache)
    dense = getattr(config, "dense", None)
    if dense is not None:
        images = dense.images
        if images.kind == "parquet":
            found["dense.images.path"] = path_fingerprint("dense.images.path", images.path, cache)
        elif images.kind == "digits":
            found["dense.images.digits"] = path_fingerprint("dense.images", digits_file(), cache)
        module = dense.backbone.module if dense.backbone.kind == "module" else None
        fingerprint = module_fingerprint(module, cache) if module else None
        if fingerprint is not None:
            found["dense.backbone.module"] = fingerprint
    if cache != before:
        _write_cache(cache)
    return found or None
