"""Run folders in object storage: `--out s3://bucket/prefix` (or another pyarrow.fs URI: gs://,
hdfs://, ...), for clusters without a shared file system.

The store is the truth; every process works in a local mirror of it. The mirror of a store lives
in crl's cache ($CRL_CACHE_DIR, else ~/.cache/crl), at store/<scheme>/<bucket>/<prefix>/; the
cache must be at the same path on every node (the paths in a job are the driver's), so set
CRL_CACHE_DIR where the nodes' home folders differ.

- A write (crl.steps.atomic) goes to staging, is uploaded as one object, then renamed into place
  in the mirror. A PUT is never visible half-written, so a finished cell is a write-once object;
  a local file exists only once its object does.
- A process that needs a file it does not hold downloads it: `pull` a folder (the driver before
  each stage plans; a pretraining worker its folder) or `fetch` one file (an embedding worker's
  shard and checkpoint). A mirror can be deleted at any time: a rerun, on this machine or a fresh
  one, finds every finished file in the store.
- `remove` deletes the file and its object (a corrupt unit computed again).

Which mirrors exist travels in the environment ($CRL_STORE, JSON {mirror root: URI}), so Ray's
workers, started after the driver opened the store, know them; a cluster's workers get it in the
job's runtime environment (crl.orchestration.runtime). Credentials and the endpoint come the
standard way: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION (or
an instance role), or URI options (s3://bucket/prefix?endpoint_override=host:port&scheme=http).
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from crl.core.errors import ConfigError
from crl.core.places import is_uri as is_uri

ENV = "CRL_STORE"
CACHE_ENV = "CRL_CACHE_DIR"  # shared with the input fingerprints' cache (crl.core.fingerprints)
STAGING = ".staging"
CHUNK = 8 << 20
# what the reading commands never need: data, features, pretraining; and cells but for `crl runs`
HEAVY = frozenset({"data", "features", "pretrain", "dense"})
CELLS = "cells"


def _process_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# read once, at import: os.umask can only be read by setting it
UMASK = _process_umask()


@dataclass(frozen=True)
class Mirror:
    """A store (its URI, options included) and its local mirror."""

    uri: str
    root: Path

    def key(self, path: Path) -> str | None:
        """The object key of a file under the mirror (None: outside it, or in staging)."""
        try:
            rel = path.resolve().relative_to(self.root)
        except ValueError:
            return None
        if not rel.parts or STAGING in rel.parts:
            return None
        base = _filesystem(self.uri)[1]
        return f"{base}/{rel.as_posix()}"


def _filesystem(uri: str):
    """pyarrow's file system of `uri` and the path it names, one per URI and endpoint."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return _opened(uri, endpoint)


@functools.lru_cache(maxsize=8)
def _opened(uri: str, endpoint: str | None):
    import pyarrow.fs as pafs

    filesystem, base = pafs.FileSystem.from_uri(uri)
    return filesystem, base.rstrip("/")


def cache_root() -> Path:
    """Where mirrors live: $CRL_CACHE_DIR, else ~/.cache/crl."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "crl").resolve()


def open_store(uri: str, probe: bool = True) -> Path:
    """The local mirror of the store at `uri`, registered in this process's environment (and so
    in the workers it starts), after proving (`probe`) an object can be written and deleted
    there."""
    scheme = urlsplit(uri).scheme.lower()
    try:
        filesystem, base = _filesystem(uri)
    except Exception as err:  # pyarrow raises ArrowInvalid, OSError, ... for a bad URI
        raise ConfigError(f"--out {uri}: not a usable store ({_first_line(err)})") from None
    if not base:
        raise ConfigError(f"--out {uri}: name a bucket (and a prefix), e.g. s3://bucket/runs")
    if probe:
        _probe(filesystem, base, uri)
    root = cache_root() / "store" / scheme / base
    root.mkdir(parents=True, exist_ok=True)
    mirrors = {**_registered(), str(root): uri}
    os.environ[ENV] = json.dumps(mirrors, sort_keys=True)
    return root


def _probe(filesystem, base: str, uri: str) -> None:
    probe = f"{base}/.crl-write-probe-{os.getpid()}"
    try:
        with filesystem.open_output_stream(probe) as stream:
            stream.write(b"")
        filesystem.delete_file(probe)
    except Exception as err:
        raise ConfigError(f"--out {uri}: cannot write there ({_first_line(err)})") from None


def local_copy(uri: str, run: str | None = None, cells: bool = False) -> Path:
    """For the reading commands: the mirror of the store at `uri` (or of its run folder `run`),
    with what they read downloaded: configs, run records, tables and report, and with `cells`
    the cell files (which `crl runs` counts)."""
    root = open_store(uri, probe=False)
    place = root if run is None else root / run
    skip = HEAVY if cells else HEAVY | {CELLS}
    try:
        pull(place, lambda parts: not skip.intersection(parts))
    except OSError as err:
        raise ConfigError(f"{uri}: cannot read the store ({_first_line(err)})") from None
    return place


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]


def _registered() -> dict[str, str]:
    try:
        mirrors = json.loads(os.environ.get(ENV) or "{}")
    except ValueError:
        return {}
    return mirrors if isinstance(mirrors, dict) else {}


def mirror_of(path: Path) -> Mirror | None:
    """The mirror that holds `path`, if any."""
    resolved = path.resolve()
    for root, uri in _registered().items():
        if resolved.is_relative_to(root):
            return Mirror(uri, Path(root))
    return None


def uri_of(path: Path) -> str | None:
    """The store URI of a mirrored file or folder (None: a plain local path)."""
    mirror = mirror_of(path)
    if mirror is None:
        return None
    rel = path.resolve().relative_to(mirror.root).as_posix()
    base = mirror.uri.split("?", 1)[0].rstrip("/")
    return base if rel == "." else f"{base}/{rel}"


def _object(path: Path) -> tuple[Mirror, str] | None:
    """The mirror of a file and its object key (None: not mirrored, or in staging)."""
    mirror = mirror_of(path)
    key = None if mirror is None else mirror.key(path)
    return None if key is None else (mirror, key)


def publish(tmp: Path, path: Path) -> None:
    """Upload the finished file `tmp` as the object of `path` (nothing when `path` is not
    mirrored); `tmp`'s time is then set to now, so a later `pull` sees the local copy as
    current."""
    found = _object(path)
    if found is None:
        return
    mirror, key = found
    filesystem = _filesystem(mirror.uri)[0]
    with open(tmp, "rb") as source, filesystem.open_output_stream(key) as target:
        while chunk := source.read(CHUNK):
            target.write(chunk)
    os.utime(tmp)


def remove(path: Path) -> None:
    """Delete `path` and, when mirrored, its object."""
    path.unlink(missing_ok=True)
    found = _object(path)
    if found is not None:
        mirror, key = found
        try:
            _filesystem(mirror.uri)[0].delete_file(key)
        except FileNotFoundError:
            pass


def fetch(path: Path) -> Path:
    """`path`, downloaded from the store first when it is mirrored and not held here."""
    found = None if path.exists() else _object(path)
    if found is not None:
        mirror, key = found
        info = _filesystem(mirror.uri)[0].get_file_info(key)
        if info.size is not None:
            _download(mirror, key, path, info.mtime)
    return path


def pull(folder: Path, keep: Callable[[tuple[str, ...]], bool] | None = None) -> int:
    """Download every object under mirrored `folder` that the mirror lacks, or holds in another
    size or an older version; `keep(parts)` chooses by the path's parts relative to `folder`.
    Returns files downloaded (0 at once for a folder that is not mirrored)."""
    mirror = mirror_of(folder)
    if mirror is None:
        return 0
    import pyarrow.fs as pafs

    filesystem, base = _filesystem(mirror.uri)
    rel = folder.resolve().relative_to(mirror.root).as_posix()
    prefix = base if rel == "." else f"{base}/{rel}"
    selector = pafs.FileSelector(prefix, allow_not_found=True, recursive=True)
    pulled = 0
    for info in filesystem.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        parts = tuple(info.path[len(prefix) + 1 :].split("/"))
        if STAGING in parts or (keep is not None and not keep(parts)):
            continue
        local = folder / Path(*parts)
        if _current(local, info):
            continue
        _download(mirror, info.path, local, info.mtime)
        pulled += 1
    return pulled


def _current(local: Path, info) -> bool:
    try:
        stat = local.stat()
    except FileNotFoundError:
        return False
    if stat.st_size != info.size:
        return False
    return info.mtime is None or stat.st_mtime >= info.mtime.timestamp() - 1.0


def _download(mirror: Mirror, key: str, path: Path, mtime) -> None:
    """The object `key` into `path`: a temporary file in the mirror's staging, then a rename, with
    the object's time."""
    staging = mirror.root / STAGING
    staging.mkdir(parents=True, exist_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".part", dir=staging)
    try:
        with (
            os.fdopen(fd, "wb") as target,
            _filesystem(mirror.uri)[0].open_input_stream(key) as source,
        ):
            while chunk := source.read(CHUNK):
                target.write(chunk)
        when = time.time() if mtime is None else mtime.timestamp()
        os.utime(tmp, (when, when))
        os.chmod(tmp, 0o666 & ~UMASK)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
