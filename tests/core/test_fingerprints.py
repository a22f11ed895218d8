"""Input fingerprints: a changed file is detected (also with its size and mtime restored), an
unchanged one is not read again, a module's source is found without running its package, and a
config whose inputs changed gets a new run folder, said in one line."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from crl.core import config as crl_config
from crl.core import fingerprints
from crl.core.errors import ConfigError
from crl.steps.runfolder import changed_inputs, prepare


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRL_CACHE_DIR", str(tmp_path / "cache"))


def _fp(path: Path) -> str:
    return fingerprints.path_fingerprint("dataset.path", path, {})


def test_same_size_and_mtime_with_other_content_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "emb.bin"
    path.write_bytes(b"a" * 1000)
    first = fingerprints.path_fingerprint("f", path, cache := {})
    stat = path.stat()
    path.write_bytes(b"b" * 1000)  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # mtime restored
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert fingerprints.path_fingerprint("f", path, cache) != first
    path.write_bytes(b"b" * 999 + b"c")  # and with the mtime changed
    assert len({first, _fp(path), fingerprints.path_fingerprint("f", path, cache)}) == 2


def test_an_unchanged_file_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "emb.bin"
    path.write_bytes(os.urandom(3 * 2**20 + 5))
    reads = []
    digest = fingerprints._digest_file
    monkeypatch.setattr(fingerprints, "_digest_file", lambda p: reads.append(p) or digest(p))
    cache: dict[str, str] = {}
    assert fingerprints.path_fingerprint("f", path, cache) == fingerprints.path_fingerprint(
        "f", path, cache
    )
    assert len(reads) == 1
    import hashlib

    assert (
        fingerprints.path_fingerprint("f", path, {})
        == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    )


def test_a_folder_changes_with_any_file_in_it(tmp_path: Path) -> None:
    folder = tmp_path / "parts"
    folder.mkdir()
    (folder / "a.parquet").write_bytes(b"1")
    (folder / "b.parquet").write_bytes(b"2")
    first = _fp(folder)
    (folder / ".hidden").write_bytes(b"ignored")
    assert _fp(folder) == first
    (folder / "c.parquet").write_bytes(b"3")
    second = _fp(folder)
    (folder / "b.parquet").write_bytes(b"4")
    assert len({first, second, _fp(folder)}) == 3
    with pytest.raises(ConfigError, match=r"dataset\.path: .* does not exist"):
        _fp(tmp_path / "missing.parquet")


def test_a_module_source_is_found_without_running_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "userpkg"
    package.mkdir()
    marker = tmp_path / "ran"
    (package / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    (package / "nets.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    source = fingerprints.module_source("userpkg.nets:Net")
    assert source == package / "nets.py" and not marker.exists()
    # no file: None, and the backbone's own checks name the problem later
    assert fingerprints.module_source("userpkg.absent:Net") is None
    assert fingerprints.module_fingerprint("sys:exit", {}).startswith("builtin:python-")
    assert fingerprints.module_fingerprint("userpkg.absent:Net", {}) is None


def _user_config(tmp_path: Path, scale: float, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    rows = 40
    pq.write_table(
        pa.table(
            {
                "x": [list(scale * rng.normal(size=4)) for _ in range(rows)],
                "label": list(np.arange(rows) % 2),
            }
        ),
        tmp_path / "emb.parquet",
    )
    path = tmp_path / "user.yaml"
    tree = {
        "name": "user",
        "dataset": {"kind": "parquet", "path": str(tmp_path / "emb.parquet")},
        "grid": {"regimes": ["scrl"], "losses": ["hinge"], "m": [1], "n": [4], "seeds": [0]},
    }
    path.write_text(yaml.safe_dump(tree))
    return path


def test_a_changed_input_gives_a_new_run_folder_said_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = _user_config(tmp_path, 1.0, 0)
    first = crl_config.load(path)
    assert set(first.inputs) == {"dataset.path"}
    prepare(first, tmp_path / "runs")
    assert crl_config.load(path).hash() == first.hash()  # unchanged: the same run
    _user_config(tmp_path, 5.0, 1)  # tonight's embeddings
    second = crl_config.load(path)
    assert second.hash() != first.hash() and second.run_id() != first.run_id()
    prepare(second, tmp_path / "runs")
    line = capsys.readouterr().err.strip()
    assert line.count("\n") == 0 and "inputs changed since" in line
    assert first.inputs["dataset.path"] in line and second.inputs["dataset.path"] in line
    assert changed_inputs(first, tmp_path / "runs") is not None
    # a config without external inputs keeps its hash (no `inputs` key in it)
    synthetic = crl_config.load(Path(__file__).resolve().parents[2] / "conf" / "quickstart.yaml")
    assert synthetic.inputs is None


def test_inputs_written_in_the_yaml_are_replaced(tmp_path: Path) -> None:
    path = _user_config(tmp_path, 1.0, 0)
    tree = yaml.safe_load(path.read_text())
    tree["inputs"] = {"dataset.path": "sha256:0000000000000000"}
    path.write_text(yaml.safe_dump(tree))
    assert crl_config.load(path).inputs["dataset.path"] != "sha256:0000000000000000"
