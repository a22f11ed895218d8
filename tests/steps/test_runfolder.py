"""crl.steps.runfolder: the paths of a run, config.json, and every refusal before work starts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crl import checks
from crl.core.config import CheckConfig
from crl.core.errors import ConfigError
from crl.steps.runfolder import CheckPaths, RunFolder, RunPaths, prepare, prepare_checks, writable
from tests.steps.helpers import config


def test_run_folder_paths(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "r")
    assert folder.tables == tmp_path / "r" / "tables"
    assert folder.report == tmp_path / "r" / "report"
    assert folder.staging == tmp_path / "r" / ".staging"
    assert not (tmp_path / "r").exists()  # paths are computed, nothing is created


def test_run_paths_and_check_paths(tmp_path: Path) -> None:
    run = RunPaths(tmp_path)
    assert (run.data, run.features, run.cells) == (
        tmp_path / "data",
        tmp_path / "features",
        tmp_path / "cells",
    )
    assert run.cell("0123abcd") == tmp_path / "cells" / "0123abcd.parquet"
    assert run.tables == tmp_path / "tables"
    check = CheckPaths(tmp_path)
    assert check.units == tmp_path / "units"
    assert check.staging == tmp_path / ".staging"
    assert isinstance(run, RunFolder) and isinstance(check, RunFolder)


def test_record_writes_config_json_with_the_hash(tmp_path: Path) -> None:
    cfg = config()
    folder = RunPaths(tmp_path / cfg.run_id())
    folder.record(cfg)
    recorded = json.loads((folder.root / "config.json").read_text())
    assert recorded == {"config": cfg.model_dump(mode="json"), "hash": cfg.hash()}
    assert recorded["hash"] == cfg.hash() and len(cfg.hash()) == 12
    assert recorded["config"]["eval"]["m_star"]["delta"] == 0.25  # defaults filled
    assert list(folder.staging.iterdir()) == []
    folder.record(cfg)  # again: the folder exists, the file is replaced
    assert json.loads((folder.root / "config.json").read_text()) == recorded
    folder.clean_staging()
    assert not folder.staging.exists()
    folder.clean_staging()  # nothing to remove: no error


def test_record_a_check_config(tmp_path: Path) -> None:
    cfg = CheckConfig(statements=["S1_convex"], instances=2)
    folder = CheckPaths(tmp_path / cfg.run_id())
    folder.record(cfg)
    recorded = json.loads((folder.root / "config.json").read_text())
    assert recorded["hash"] == cfg.hash()
    assert recorded["config"]["statements"] == ["S1_convex"]


def test_writable_creates_nested_folders_and_leaves_no_probe(tmp_path: Path) -> None:
    out = writable(tmp_path / "a" / "b")
    assert out == tmp_path / "a" / "b" and out.is_dir()
    assert list(out.iterdir()) == []
    assert writable(str(out)) == out  # a str is accepted too


def test_writable_refuses_a_file_where_the_folder_should_be(tmp_path: Path) -> None:
    blocker = tmp_path / "runs"
    blocker.write_text("not a folder")
    for out in (blocker, blocker / "below"):
        with pytest.raises(ConfigError, match=r"^--out ") as err:
            writable(out)
        assert str(out) in str(err.value)
        assert "\n" not in str(err.value)
    assert blocker.read_text() == "not a folder"


def test_prepare_creates_the_run_folder_and_config(tmp_path: Path) -> None:
    cfg = config()
    paths = prepare(cfg, tmp_path / "runs")
    assert isinstance(paths, RunPaths)
    assert paths.root == tmp_path / "runs" / f"tiny-{cfg.hash()}"
    assert json.loads((paths.root / "config.json").read_text())["hash"] == cfg.hash()
    assert sorted(p.name for p in paths.root.iterdir()) == [".staging", "config.json"]


def test_prepare_refuses_n_larger_than_a_train_split_the_cells_draw_from(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    cfg = config(dataset={"kind": "digits"}, grid={"n": [10, 5000]})
    with pytest.raises(ConfigError, match=r"grid\.n") as err:
        prepare(cfg, out)
    assert "n=5000" in str(err.value) and "larger than the train split" in str(err.value)
    assert not out.exists()
    # synthetic cells draw fresh points of the law: the 60-row train split is no limit
    prepare(config(grid={"n": [10, 61]}), out)


def test_prepare_refuses_small_cnn_on_non_square_inputs_before_writing(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    cfg = config(dataset={"dim": 30}, encoder={"kind": "small_cnn", "out_dim": 4})
    with pytest.raises(ConfigError, match=r"encoder\.kind") as err:
        prepare(cfg, out)
    assert "30" in str(err.value)
    assert "\n" not in str(err.value)
    assert not out.exists()


def test_prepare_accepts_small_cnn_on_square_inputs(tmp_path: Path) -> None:
    cfg = config(dataset={"dim": 36}, encoder={"kind": "small_cnn", "out_dim": 4})
    assert (prepare(cfg, tmp_path).root / "config.json").is_file()
    digits = config(
        dataset={"kind": "digits", "shards": 2}, encoder={"kind": "small_cnn", "out_dim": 4}
    )
    assert (prepare(digits, tmp_path).root / "config.json").is_file()  # 8x8 images


def test_prepare_checks_square_images_of_a_user_parquet(tmp_path: Path) -> None:
    rows = 12
    rng = np.random.default_rng(0)
    images = [rng.random((3, 3)).tolist() for _ in range(rows)]  # nested rows, 3x3 = 9 values
    flat = [rng.random(10).tolist() for _ in range(rows)]  # 10 values: not square
    pq.write_table(
        pa.table({"img": images, "x": flat, "label": [i % 2 for i in range(rows)]}),
        tmp_path / "user.parquet",
    )
    path = str(tmp_path / "user.parquet")
    encoder = {"kind": "small_cnn", "out_dim": 4}
    grid = {"n": [2]}
    ok = config(
        dataset={"kind": "parquet", "path": path, "image_column": "img", "feature_column": None},
        encoder=encoder,
        grid=grid,
    )
    prepare(ok, tmp_path / "ok")
    bad = config(dataset={"kind": "parquet", "path": path}, encoder=encoder, grid=grid)
    with pytest.raises(ConfigError, match=r"encoder\.kind"):
        prepare(bad, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_prepare_refuses_a_test_split_of_one_row(tmp_path: Path) -> None:
    rows = 6
    pq.write_table(
        pa.table(
            {
                "x": [[float(i), 1.0] for i in range(rows)],
                "label": [i % 2 for i in range(rows)],
                "split": ["train"] * (rows - 1) + ["test"],
            }
        ),
        tmp_path / "user.parquet",
    )
    dataset = {"kind": "parquet", "path": str(tmp_path / "user.parquet"), "split_column": "split"}
    with pytest.raises(ConfigError, match=r"test split has 1 rows"):
        prepare(config(dataset=dataset, grid={"n": [2]}), tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_prepare_refuses_an_unwritable_out_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"^--out "):
        prepare(config(), blocker / "runs")


def test_prepare_checks_refuses_an_unknown_statement(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    cfg = CheckConfig(statements=["S1_convex", "S99_nonsense"])
    with pytest.raises(ConfigError, match=r"config field statements") as err:
        prepare_checks(cfg, out)
    assert "S99_nonsense" in str(err.value)
    assert "S1_convex" not in str(err.value).split("; known:")[0]  # only the unknown one is named
    assert not out.exists()


def test_prepare_checks_creates_the_folder(tmp_path: Path) -> None:
    cfg = CheckConfig(statements=list(checks.STATEMENTS)[:2])
    paths = prepare_checks(cfg, tmp_path / "runs")
    assert isinstance(paths, CheckPaths)
    assert paths.root == tmp_path / "runs" / f"checks-{cfg.hash()}"
    assert json.loads((paths.root / "config.json").read_text())["hash"] == cfg.hash()
    # every statement (None) is accepted
    assert prepare_checks(CheckConfig(), tmp_path / "runs").root.is_dir()


def test_prepare_refuses_pairs_whose_score_model_cannot_fit(tmp_path: Path) -> None:
    """The probe: 60 pairs of dimension 20000 (an 11 MB file) drove the driver to about 20 GB,
    the p x p score model fitting; now refused before any work, naming the dataset."""
    gen = np.random.default_rng(0)
    wide = [gen.normal(size=20000).astype(np.float32) for _ in range(12)]
    pq.write_table(pa.table({"x": wide, "y": wide}), tmp_path / "wide.parquet")
    dataset = {"kind": "paired_parquet", "path": str(tmp_path / "wide.parquet"), "shards": 1}
    grid = {"regimes": ["scrl"], "losses": ["lse"], "m": [1], "n": [2], "seeds": [0]}
    model = {"solver": "apg"}
    with pytest.raises(ConfigError, match=r"^dataset: pairs of 20000 and 20000 values need"):
        prepare(config(dataset=dataset, grid=grid, model=model), tmp_path / "runs")
    assert not (tmp_path / "runs").exists()
    narrow = [row[:16] for row in wide]
    pq.write_table(pa.table({"x": narrow, "y": narrow}), tmp_path / "narrow.parquet")
    dataset["path"] = str(tmp_path / "narrow.parquet")
    prepare(config(dataset=dataset, grid=grid, model=model), tmp_path / "runs")
