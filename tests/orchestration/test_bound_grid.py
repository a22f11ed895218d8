"""The main job end to end: the real flow (Ray + Prefect + Parquet) on tiny configs."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from crl.core import config
from crl.steps import data
from crl.steps.keys import grid_keys
from tests.conftest import REPO, TIMING, crl

pytestmark = pytest.mark.slow

TINY = {
    "name": "tiny",
    "seed": 3,
    "dataset": {
        "kind": "synthetic",
        "classes": 3,
        "dim": 6,
        "prior": "zipf",
        "train_size": 300,
        "test_size": 200,
        "shards": 2,
    },
    "model": {"d": 4, "R": 1.5, "steps": 20, "batch": 32},
    "grid": {
        "regimes": ["one_negative", "scrl", "sscrl"],
        "losses": ["hinge", "lse"],
        "m": [1, 3],
        "n": [20, 60],
        "seeds": [0, 1],
    },
    "eval": {"test_anchors": 150, "negative_pool": 100, "probe_points": 200, "rademacher_draws": 8},
}


def write_config(folder: Path, tree: dict, name: str = "c.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(tree))
    return path


def run_twice(folder: Path, tree: dict) -> dict:
    """`crl run` of `tree` in folder, then the same run again (a resume): the config, the run
    folder, both processes and the tables' bytes after the first."""
    path = write_config(folder, tree)
    first = crl("run", str(path), "--out", str(folder / "runs"), "--quiet")
    assert first.returncode == 0, first.stderr[-3000:]
    cfg = config.load(path)
    run_dir = folder / "runs" / cfg.run_id()
    before = {p.name: p.read_bytes() for p in (run_dir / "tables").glob("*.parquet")}
    second = crl("run", str(path), "--out", str(folder / "runs"), "--quiet")
    assert second.returncode == 0, second.stderr[-3000:]
    return {"config": cfg, "dir": run_dir, "first": first, "second": second, "before": before}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_twice(tmp_path_factory.mktemp("tiny"), TINY)


def test_every_cell_present_once(tiny_run: dict) -> None:
    cells = pl.read_parquet(tiny_run["dir"] / "tables" / "cells.parquet")
    keys = grid_keys(tiny_run["config"])
    assert cells.height == len(keys) == 5 * 2 * 2 * 2
    assert cells["cell_id"].n_unique() == cells.height
    assert set(
        zip(cells["regime"], cells["loss"], cells["m"], cells["n"], cells["seed"], strict=True)
    ) == {(k.regime, k.loss, k.m, k.n, k.seed) for k in keys}
    assert len(list((tiny_run["dir"] / "cells").glob("*.parquet"))) == len(keys)


def test_bounds_recomputed_from_the_table_alone_and_every_one_holds(tiny_run: dict) -> None:
    """docs/theory/bounds.md's formulas, written here from the table's own ingredient columns."""
    cells = pl.read_parquet(tiny_run["dir"] / "tables" / "cells.parquet")
    assert cells["certified"].all() and (cells["sampling"] == "fresh_from_model").all()
    for row in cells.iter_rows(named=True):
        assert row["gap"] == row["test_loss"] - row["train_loss"]
        n, m, d, p, R = row["n"], row["m"], row["d"], row["p"], row["R"]
        level, L, w = row["bound_delta"], row["loss_lipschitz"], row["loss_omega"]
        B = row["loss_range"]
        assert level == (row["delta"] / 2 if row["regime"] == "sscrl" else row["delta"])
        s_form = 3 * B * math.sqrt(math.log(4 / level) / (2 * n))
        seed_term = (
            2 * math.sqrt(18) * row["loss_lipschitz_seed"] * R * R * math.sqrt(d * row["S2"]) / n
        )
        assert row["gamma_m"] == pytest.approx(seed_term + s_form, rel=1e-9)
        l2p = math.log(2 * p)
        routes = [
            2 * math.sqrt(3) * math.sqrt(6) * L * R * R * math.sqrt(d * row["S2"]) / n,
            2
            * math.sqrt(3)
            * R
            * R
            * math.sqrt(d)
            * (L * math.sqrt(5 * row["S_pairs"]) + math.sqrt(w * row["S_neg"]))
            / n,
            2 * (1 if m == 1 else math.sqrt(2)) * L * R * R * math.sqrt(2 * l2p * row["v_A"]) / n,
            2
            * math.sqrt(2)
            * R
            * R
            * math.sqrt(2 * l2p)
            * (L * math.sqrt(row["v_0"]) + math.sqrt(w * row["v_N"]))
            / n,
        ]
        assert row["gamma_S"] == pytest.approx(min(routes) + s_form, rel=1e-9)
        for name in ("gamma_m", "gamma_S", "gamma_E"):
            assert row[f"{name}_holds"] is True, (name, row["cell_id"])
        if row["regime"] == "sscrl" and row["loss"] != "hinge":
            assert row["sscrl_total_holds"] is True
        if row["regime"] == "sscrl" and row["loss"] == "hinge":
            assert row["sscrl_inner"] is None and "Prop. 4.4" in row["sscrl_inner_reason"]


def test_tau_is_sum_of_squared_prior(tiny_run: dict) -> None:
    cfg = tiny_run["config"]
    rho = data.synthetic_model(cfg.dataset, cfg.seed).prior
    cells = pl.read_parquet(tiny_run["dir"] / "tables" / "cells.parquet")
    assert cells["tau"].unique().to_list() == [pytest.approx(float((rho**2).sum()), abs=1e-12)]


def test_values_are_sane(tiny_run: dict) -> None:
    cells = pl.read_parquet(tiny_run["dir"] / "tables" / "cells.parquet")
    assert (cells["rademacher"] > 0).all() and (cells["rademacher_ci"] >= 0).all()
    assert cells["retrieval_auc"].is_between(0, 1).all()
    assert cells["linear_probe_accuracy"].is_between(0, 1).all()
    hinge = cells.filter(pl.col("loss") == "hinge")
    assert (hinge["train_loss"] >= 0).all()
    for col in ("run_id", "config_hash", "crl_version", "git_commit"):
        assert cells[col].n_unique() == 1
    assert cells["config_hash"][0] == tiny_run["config"].hash()


def test_summary_and_fits(tiny_run: dict) -> None:
    tables = tiny_run["dir"] / "tables"
    summary = pl.read_parquet(tables / "summary.parquet")
    cells = pl.read_parquet(tables / "cells.parquet")
    assert summary.height == cells.height // 2
    assert (summary["seeds"] == 2).all()
    one = summary.filter(
        (pl.col("regime") == "scrl")
        & (pl.col("m") == 3)
        & (pl.col("n") == 60)
        & (pl.col("loss") == "lse")
    )
    gaps = cells.filter(
        (pl.col("regime") == "scrl")
        & (pl.col("m") == 3)
        & (pl.col("n") == 60)
        & (pl.col("loss") == "lse")
    )["gap"].to_numpy()
    assert one["gap_mean"][0] == pytest.approx(gaps.mean())
    assert one["gap_std"][0] == pytest.approx(gaps.std(ddof=1))
    assert one["gap_seed_ci"][0] == pytest.approx(
        12.706204736 * gaps.std(ddof=1) / math.sqrt(2), rel=1e-6
    )
    fits = pl.read_parquet(tables / "fits.parquet")
    rates = fits.filter(pl.col("kind") == "rate")
    assert set(rates["shape"]) == {"scrl", "sscrl", "lei", "saunshi_k"}
    assert rates.height == 4 * 5


def test_report_written(tiny_run: dict) -> None:
    report = tiny_run["dir"] / "report"
    for name in ("gap_vs_n.png", "gap_vs_m.png", "downstream_vs_m.png"):
        assert (report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (report / "index.html").read_text()
    assert "gap_vs_n.png" in page and tiny_run["config"].hash() in page
    assert not (tiny_run["dir"] / ".staging").exists()


def test_rerun_skips_every_cell_and_tables_identical(tiny_run: dict) -> None:
    assert "(40 already done, 0 computed" in tiny_run["second"].stdout
    stages = re.search(r"wall seconds by stage: (.*)", tiny_run["first"].stdout).group(1)
    names = [part.split()[0] for part in stages.split(" | ")]
    assert names == ["start", "materialize", "embed", "cells", "aggregate", "report"]
    assert all(float(part.split()[1]) >= 0 for part in stages.split(" | "))
    after = {p.name: p.read_bytes() for p in (tiny_run["dir"] / "tables").glob("*.parquet")}
    assert after == tiny_run["before"]


def test_query_and_report_commands(tiny_run: dict) -> None:
    out = crl(
        "query",
        str(tiny_run["dir"]),
        "select regime, count(*) as cells from cells group by regime order by regime",
    )
    assert out.returncode == 0, out.stderr
    assert "one_negative" in out.stdout and "sscrl" in out.stdout
    bad = crl("query", str(tiny_run["dir"]), "select nope from cells")
    assert bad.returncode == 2 and "query" in bad.stderr
    rebuilt = crl("report", str(tiny_run["dir"]))
    assert rebuilt.returncode == 0 and "index.html" in rebuilt.stdout


def test_digits_augmented_small_cnn(tmp_path: Path) -> None:
    tree = {
        "name": "digits-tiny",
        "dataset": {"kind": "digits", "positives": "augmented", "shards": 2},
        "encoder": {"kind": "small_cnn", "out_dim": 32},
        "model": {"d": 8, "steps": 20},
        "grid": {
            "regimes": ["scrl", "one_negative"],
            "losses": ["info_nce", "logistic"],
            "m": [1, 4],
            "n": [40],
            "seeds": [0],
        },
        "eval": {
            "test_anchors": 100,
            "negative_pool": 64,
            "probe_points": 300,
            "rademacher_draws": 4,
        },
    }
    # the local executor: the Ray path of the embed and cells stages is tiny_run's
    out = crl(
        "run",
        str(write_config(tmp_path, tree)),
        "--out",
        str(tmp_path / "runs"),
        "--quiet",
        "--executor",
        "local",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = next((tmp_path / "runs").iterdir())
    features = pq.read_table(run_dir / "features" / "split=train" / "part-00000.parquet")
    assert {"view_a", "view_b"} <= set(features.column_names)
    assert features.schema.field("x").type.list_size == 32
    cells = pl.read_parquet(run_dir / "tables" / "cells.parquet")
    assert cells.height == 2 * 2 + 2  # scrl x {info_nce, logistic} x m, one_negative x logistic x m
    assert cells["tau"][0] == pytest.approx(0.1, abs=0.01)  # ten nearly balanced digit classes


def test_user_parquet(tmp_path: Path) -> None:
    gen = np.random.default_rng(0)
    labels = gen.integers(0, 3, 240)
    x = gen.normal(size=(240, 5)) + labels[:, None]
    table = pa.table({"feat": [list(r) for r in x], "y": [f"c{v}" for v in labels]})
    pq.write_table(table, tmp_path / "mine.parquet")
    tree = {
        "name": "mine",
        "dataset": {
            "kind": "parquet",
            "path": str(tmp_path / "mine.parquet"),
            "feature_column": "feat",
            "label_column": "y",
            "shards": 2,
        },
        "encoder": {"kind": "random_features", "out_dim": 16},
        "grid": {"regimes": ["sscrl"], "losses": ["lse"], "m": [2], "n": [30], "seeds": [0]},
        "eval": {"rademacher_draws": 4},
    }
    out = crl(
        "run",
        str(write_config(tmp_path, tree)),
        "--out",
        str(tmp_path / "runs"),
        "--quiet",
        "--executor",
        "local",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    cells = pl.read_parquet(next((tmp_path / "runs").iterdir()) / "tables" / "cells.parquet")
    assert cells.height == 1 and cells["p"][0] == 16


BAD_OVERRIDES = [
    ("grid.m=[0]", "grid.m"),
    ("grid.n=[0]", "grid.n"),  # n above a split's rows: tests/steps/unimodal/test_pretrain.py
    ("model.R=0", "model.R"),
    ("eval.temperature=-1", "eval.temperature"),
    ("eval.delta=1", "eval.delta"),
    ("grid.seeds=[]", "grid.seeds"),
    ("grid.losses=[squared]", "grid.losses"),
    ("grid.regimes=[moco]", "grid.regimes"),
    ("dataset.kind=imagenet", "dataset"),
    ("extra_key=1", "extra_key"),
]


@pytest.mark.parametrize(("override", "field"), BAD_OVERRIDES)
def test_bad_config_exit_2_nothing_written(tmp_path: Path, override: str, field: str) -> None:
    out = crl(
        "run", str(write_config(tmp_path, TINY)), "--out", str(tmp_path / "runs"), "--set", override
    )
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], out.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def _parquet_config(tmp_path: Path, path: Path, **dataset: str) -> Path:
    tree = dict(TINY, dataset={"kind": "parquet", "path": str(path), **dataset})
    return write_config(tmp_path, tree, f"{path.stem}.yaml")


def test_bad_files_exit_2(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    missing = crl("run", str(tmp_path / "absent.yaml"), "--out", runs)
    assert missing.returncode == 2 and "absent.yaml" in missing.stderr
    (tmp_path / "bad.yaml").write_text("grid: [unclosed\n")
    not_yaml = crl("run", str(tmp_path / "bad.yaml"), "--out", runs)
    assert not_yaml.returncode == 2 and "YAML" in not_yaml.stderr

    cases = []
    cases.append((_parquet_config(tmp_path, tmp_path / "nope.parquet"), "does not exist"))
    pq.write_table(pa.table({"x": [[1.0, 2.0]] * 4}), tmp_path / "nolabel.parquet")
    cases.append((_parquet_config(tmp_path, tmp_path / "nolabel.parquet"), "label_column"))
    pq.write_table(
        pa.table({"x": [[1.0, 2.0], [1.0]] * 2, "label": [0, 1] * 2}), tmp_path / "mixed.parquet"
    )
    cases.append((_parquet_config(tmp_path, tmp_path / "mixed.parquet"), "mixed lengths"))
    (tmp_path / "corrupt.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
    cases.append(
        (_parquet_config(tmp_path, tmp_path / "corrupt.parquet"), "not a readable Parquet")
    )
    for path, words in cases:
        out = crl("run", str(path), "--out", runs)
        assert out.returncode == 2 and words in out.stderr, (path, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_unwritable_output_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = crl("run", str(write_config(tmp_path, TINY)), "--out", str(blocker / "runs"))
    assert out.returncode == 2 and "--out" in out.stderr


def test_local_executor_writes_the_same_cells_table(tiny_run: dict, tmp_path: Path) -> None:
    """`--executor local` (no Ray) runs the same steps: the same cells, summary and fits."""
    path = write_config(tmp_path, TINY)
    out = crl("run", str(path), "--out", str(tmp_path / "runs"), "--quiet", "--executor", "local")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "local executor, no Ray" in out.stdout
    for name in ("cells", "summary", "fits"):
        ray_table = pl.read_parquet(tiny_run["dir"] / "tables" / f"{name}.parquet")
        local = pl.read_parquet(
            tmp_path / "runs" / tiny_run["config"].run_id() / "tables" / f"{name}.parquet"
        )
        timing = [c for c in ray_table.columns if c.startswith(TIMING)]
        assert local.drop(timing).equals(ray_table.drop(timing)), name


def test_every_cell_failing_exits_1_naming_the_failures(tmp_path: Path) -> None:
    """Every cell raises: no traceback, failures.parquet, exit 1 naming it."""
    tree = {**TINY, "grid": {**TINY["grid"], "regimes": ["scrl"], "m": [3], "n": [20]}}
    path = write_config(tmp_path, tree)
    inject = {"PYTHONPATH": str(REPO / "tests" / "fault_injection"), "CRL_FAULT": "raise:3:20"}
    out = crl(
        "run",
        str(path),
        "--out",
        str(tmp_path / "runs"),
        "--quiet",
        "--executor",
        "local",
        env=inject,
    )
    assert out.returncode == 1, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    failures = list((tmp_path / "runs").glob("*/tables/failures.parquet"))
    assert len(failures) == 1 and pl.read_parquet(failures[0]).height == 2 * 2
    assert "failures recorded in" in out.stderr and str(failures[0]) in out.stderr


def test_small_cnn_on_non_square_inputs_exit_2_nothing_written(tmp_path: Path) -> None:
    tree = {**TINY, "encoder": {"kind": "small_cnn"}}  # dim 6 is not a square image
    path = write_config(tmp_path, tree)
    out = crl("run", str(path), "--out", str(tmp_path / "runs"))
    assert out.returncode == 2 and "encoder.kind" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_every_column_of_every_table_is_described(tiny_run: dict) -> None:
    from tests.schema_check import assert_described

    checked = assert_described(tiny_run["dir"] / "tables")
    assert {"cells", "summary", "fits", "frontier"} <= set(checked)
