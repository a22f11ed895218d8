"""Operations a user can trust and watch: progress lines, Prefect artifacts, and the defects a
probe of bad input and damaged run folders found (each reproduced here first)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import pytest
import yaml

from tests import services
from tests.conftest import REPO, crl
from tests.orchestration.test_bound_grid import TINY, write_config

pytestmark = pytest.mark.slow
SMALL = dict(TINY, grid=dict(TINY["grid"], regimes=["scrl"], n=[20, 60], seeds=[0]))


def _one_line_exit_2(out: subprocess.CompletedProcess, *words: str) -> None:
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 600, out.stderr[-2000:]
    for word in words:
        assert word in lines[0], lines[0]


def test_progress_lines_in_a_non_tty_run(tmp_path: Path) -> None:
    path = write_config(tmp_path, SMALL)
    out = crl("run", str(path), "--out", str(tmp_path / "runs"), "--executor", "local")
    assert out.returncode == 0, out.stderr[-2000:]
    done = [int(m) for m in re.findall(r"crl: cells (\d+)/8 ", out.stderr)]
    assert done[-1] == 8 and len(done) == 8  # 8 cells: a line per cell (each is >= 10%)
    quiet = crl("run", str(path), "--out", str(tmp_path / "q"), "--executor", "local", "--quiet")
    assert quiet.returncode == 0 and "crl: cells" not in quiet.stderr


ARTIFACTS = """
import sys
from crl.orchestration import local_prefect
local_prefect.prefect_local_env()
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
from crl.orchestration.flows import bound_grid, theorem_checks
for state in (
    bound_grid(sys.argv[1], [], sys.argv[2], None, False, "local", return_state=True),
    theorem_checks(None, sys.argv[2], 1, None, False, ["statements=[S2_contraction]"], "local",
                   return_state=True),
):
    run = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run]))
        )
    for artifact in found:
        print("ARTIFACT", artifact.key, artifact.type, len(str(artifact.data)))
"""


def test_flow_runs_publish_artifacts_read_back_from_the_api(tmp_path: Path) -> None:
    path = write_config(tmp_path, SMALL)
    env = {**os.environ, "PREFECT_API_URL": services.session_prefect().api}
    out = subprocess.run(
        [sys.executable, "-c", ARTIFACTS, str(path), str(tmp_path / "runs")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line.split() for line in out.stdout.splitlines() if line.startswith("ARTIFACT")]
    found = {tuple(words[1:3]) for words in lines}
    assert found == {
        ("crl-grid-summary", "table"),
        ("crl-grid-run", "markdown"),
        ("crl-checks-summary", "table"),
        ("crl-checks-run", "markdown"),
    }


def test_damaged_and_stray_cell_files_on_resume(tmp_path: Path) -> None:
    """Defect 1: a truncated cell file is recomputed (said on stderr); a stray copy and a ._
    sidecar are not cells of this config and are ignored: no duplicated row, same tables."""
    path = write_config(tmp_path, SMALL)
    runs = tmp_path / "runs"
    first = crl("run", str(path), "--out", str(runs), "--quiet", "--executor", "local")
    assert first.returncode == 0, first.stderr[-2000:]
    run_dir = next(runs.iterdir())
    before = pl.read_parquet(run_dir / "tables" / "cells.parquet")
    files = sorted((run_dir / "cells").glob("*.parquet"))
    files[0].write_bytes(files[0].read_bytes()[:100])  # truncated
    shutil.copy(files[1], run_dir / "cells" / f"{files[1].stem} (copy).parquet")
    (run_dir / "cells" / f"._{files[2].name}").write_bytes(b"\x00\x05\x16\x07")
    shard = sorted((run_dir / "features").glob("split=train/*.parquet"))[0]
    shard.write_bytes(shard.read_bytes()[:50])  # a truncated features shard too
    second = crl("run", str(path), "--out", str(runs), "--quiet", "--executor", "local")
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"{files[0]} is incomplete or corrupt" in second.stderr
    assert f"{shard} is incomplete or corrupt" in second.stderr
    assert "1 computed" in second.stdout
    after = pl.read_parquet(run_dir / "tables" / "cells.parquet")
    timing = [c for c in after.columns if c.endswith("_seconds")]
    assert after.height == before.height == 8
    assert after.drop(timing).equals(before.drop(timing))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--set", "model.R=.inf"], ["model.R"]),
        (["--set", "eval.temperature=.nan"], ["eval.temperature"]),
        (["--set", "name=" + "x" * 243], ["config field name"]),
        (["--set", "dataset.shards=1000000000"], ["dataset.shards"]),
        (["--set", "runtime.cell_cpus=4096"], ["runtime.cell_cpus"]),
        (["--set", "grid.m=[100000000]"], ["grid.m"]),
        (["--ray-address", "not an address"], ["--ray-address"]),
        (["--ray-address", f"127.0.0.1:{_closed_port()}"], ["--ray-address", "nothing answers"]),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, args: list[str], words: list[str]
) -> None:
    """Defect 4: each of these was a traceback or a hang; now exit 2 naming the field."""
    path = write_config(tmp_path, SMALL)
    out = crl("run", str(path), "--out", str(tmp_path / "runs"), *args, timeout=60)
    _one_line_exit_2(out, *words)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_bad_config_files_exit_2_with_one_bounded_line(tmp_path: Path) -> None:
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("name: caf\xe9\n".encode("latin-1"))
    _one_line_exit_2(crl("run", str(latin), "--out", str(tmp_path / "runs")), "not UTF-8")
    bomb = tmp_path / "bomb.yaml"  # a YAML alias bomb: every level doubles the last
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 9)]
    bomb.write_text("\n".join(levels) + "\nname: *a8\n")
    _one_line_exit_2(crl("run", str(bomb), "--out", str(tmp_path / "runs")), "config field")
    empty = tmp_path / "empty.parquet"
    pl.DataFrame(
        {"x": [[], []], "label": [0, 1]}, schema={"x": pl.List(pl.Float32), "label": pl.Int64}
    ).write_parquet(empty)
    tree = dict(SMALL, dataset={"kind": "parquet", "path": str(empty)})
    _one_line_exit_2(
        crl("run", str(write_config(tmp_path, tree, "p.yaml")), "--out", str(tmp_path / "runs")),
        "empty list",
    )


@pytest.mark.parametrize(
    ("module", "words"),
    [
        ("os:system", "not a subclass of torch.nn.Module"),
        ("sys:exit", "not a subclass of torch.nn.Module"),  # exited 0 with no output
        ("tests.steps.dense.backbones:ExitNet", "raised SystemExit"),
        ("tests.steps.dense.backbones:NanNet", "non-finite features"),
    ],
)
def test_a_backbone_module_runs_nothing_but_a_network(
    tmp_path: Path, module: str, words: str
) -> None:
    """The probe of the trust issue, as it was typed: `module: os:system` ran the shell command
    during validation, then exited 2; `sys:exit` exited 0 having run nothing."""
    marker = tmp_path / "x"
    out = crl(
        "run",
        "conf/dense.yaml",
        "--executor",
        "local",
        "--out",
        str(tmp_path / "runs"),
        "--set",
        "dense.backbone.kind=module",
        "--set",
        f"dense.backbone.module={module}",
        "--set",
        f'dense.backbone.module_kwargs={{command: "id > {marker}"}}'
        if module == "os:system"
        else "dense.backbone.module_kwargs={}",
        timeout=120,
    )
    _one_line_exit_2(out, "config field dense.backbone", words)
    assert not marker.exists()
    assert not (tmp_path / "runs").exists()


def test_report_of_damaged_tables_exit_2_naming_the_file(tmp_path: Path) -> None:
    """The probe: `crl report` on a truncated summary.parquet gave a raw traceback."""
    tables = tmp_path / "run" / "tables"
    tables.mkdir(parents=True)
    (tables / "summary.parquet").write_bytes(b"PAR1 truncated")
    (tables / "fits.parquet").write_bytes(b"")
    _one_line_exit_2(crl("report", str(tmp_path / "run")), "summary.parquet", "crl run")


def _grid_tables(root: Path) -> None:
    from crl.steps.aggregate import write_grid_tables
    from tests.steps.tables_data import PROVENANCE, cell_rows, write_cells
    from tests.steps.test_tables import SPEC

    files = write_cells(root / "cells", cell_rows())
    write_grid_tables(files, root / "tables", root / ".staging", PROVENANCE, SPEC)


def test_report_interrupted_exits_130_with_one_line(tmp_path: Path) -> None:
    """The probe: `crl report` had no signal handler (SIGTERM: exit 143, no line)."""
    _grid_tables(tmp_path / "run")
    driver = subprocess.Popen(
        [sys.executable, "-m", "crl", "report", str(tmp_path / "run")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60  # the first plot is written: the report is under way
    while time.monotonic() < deadline and not list((tmp_path / "run" / "report").glob("*.png")):
        assert driver.poll() is None, "the report finished before it could be interrupted"
        time.sleep(0.02)
    driver.send_signal(signal.SIGTERM)
    _, stderr = driver.communicate(timeout=60)
    assert driver.returncode == 130, stderr[-2000:]
    assert stderr.strip().splitlines()[-1].startswith("crl: interrupted")
    again = crl("report", str(tmp_path / "run"))
    assert again.returncode == 0 and "index.html" in again.stdout, again.stderr[-2000:]


def test_report_of_an_empty_tables_folder_exit_2(tmp_path: Path) -> None:
    (tmp_path / "run" / "tables").mkdir(parents=True)
    _one_line_exit_2(crl("report", str(tmp_path / "run")), "no summary/fits or checks tables")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_run_folder_exit_2(tmp_path: Path) -> None:
    path = write_config(tmp_path, SMALL)
    run_dir = tmp_path / "runs" / yaml.safe_load(path.read_text())["name"]
    run_dir.mkdir(parents=True)
    from crl.core import config

    real = tmp_path / "runs" / config.load(path).run_id()
    run_dir.rename(real)
    real.chmod(0o500)
    try:
        _one_line_exit_2(crl("run", str(path), "--out", str(tmp_path / "runs")), "run folder")
    finally:
        real.chmod(0o700)


def test_prefect_home_defaults_to_a_writable_cache(tmp_path: Path) -> None:
    from crl.orchestration import local_prefect

    env = {k: v for k, v in os.environ.items() if k != "CRL_PREFECT_HOME"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    code = "from crl.orchestration import local_prefect; print(local_prefect.prefect_home())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO
    )
    assert out.stdout.strip() == str(tmp_path / "cache" / "crl" / "prefect")
    assert local_prefect.prefect_home() != REPO / ".prefect" or os.environ.get("CRL_PREFECT_HOME")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_at_once_and_the_rerun_resumes(tmp_path: Path, sig: int) -> None:
    """Defect 6: Ctrl-C or SIGTERM cancels the queued cells, stops the servers crl started and
    exits 130 within seconds with one line on how to resume; the rerun completes."""
    path = write_config(tmp_path, dict(TINY, grid=dict(TINY["grid"], seeds=[0])))  # 20 cells
    runs = tmp_path / "runs"
    env = dict(os.environ)  # SIGTERM: Prefect's temporary server; SIGINT: the session's server
    if sig == signal.SIGINT:
        env["PREFECT_API_URL"] = services.session_prefect().api
    driver = subprocess.Popen(
        [sys.executable, "-m", "crl", "run", str(path), "--out", str(runs), "--quiet"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(list(runs.glob("*/cells/*.parquet"))) < 2:
        assert driver.poll() is None, "the run finished before it could be interrupted"
        time.sleep(0.05)
    children = [
        p
        for p in os.listdir("/proc")
        if p.isdigit()
        and _parent(p) == driver.pid
        and b"crl.orchestration.watchdog" not in Path(f"/proc/{p}/cmdline").read_bytes()
    ]
    assert children  # Ray's processes, and Prefect's temporary server when crl started one
    sent = time.monotonic()
    driver.send_signal(sig)
    _, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 130, stderr[-2000:]
    assert time.monotonic() - sent < 30
    assert stderr.strip().splitlines()[-1].startswith("crl: interrupted; finished work is kept")
    deadline = time.monotonic() + 30  # the watchdog stops them within seconds
    alive = children
    while time.monotonic() < deadline and alive:
        time.sleep(0.5)
        alive = [p for p in children if Path(f"/proc/{p}").exists() and _state(p) != "Z"]
    assert alive == [], [Path(f"/proc/{p}/cmdline").read_bytes()[:80] for p in alive]
    again = crl("run", str(path), "--out", str(runs), "--quiet", "--executor", "local")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "already done" in again.stdout


def _parent(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _state(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def test_cells_from_another_commit_are_reused_visibly_or_recomputed(tmp_path: Path) -> None:
    """Defect 2: a rerun at a new commit relabelled every old row with the new commit."""
    path = write_config(tmp_path, SMALL)
    runs = tmp_path / "runs"

    def run(commit: str, *extra: str) -> subprocess.CompletedProcess:
        out = crl(
            "run",
            str(path),
            "--out",
            str(runs),
            "--quiet",
            "--executor",
            "local",
            *extra,
            env={"CRL_GIT_COMMIT": commit},
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return out

    run("aaa")
    reused = run("bbb")
    assert "reusing 8 of 8 finished cells computed at another commit than bbb" in reused.stderr
    cells = pl.read_parquet(next(runs.iterdir()) / "tables" / "cells.parquet")
    assert set(cells["git_commit"]) == {"bbb"} and set(cells["cell_git_commit"]) == {"aaa"}
    again = run("bbb", "--recompute-stale")
    assert "recomputing 8 cells computed at another commit" in again.stderr
    cells = pl.read_parquet(next(runs.iterdir()) / "tables" / "cells.parquet")
    assert set(cells["cell_git_commit"]) == {"bbb"}


def test_kill_9_of_crl_alone_leaves_no_server_or_ray_behind(tmp_path: Path) -> None:
    """Defect 7: Prefect's temporary server outlived a SIGKILLed crl for minutes, Ray agents for
    60-90 s. The watchdog stops every process crl started once crl is gone."""
    path = write_config(tmp_path, dict(TINY, grid=dict(TINY["grid"], seeds=[0, 1, 2])))
    runs = tmp_path / "runs"
    driver = subprocess.Popen(
        [sys.executable, "-m", "crl", "run", str(path), "--out", str(runs), "--quiet"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(list(runs.glob("*/cells/*.parquet"))) < 3:
        assert driver.poll() is None, "the run finished before it could be killed"
        time.sleep(0.05)
    from crl.orchestration import watchdog

    started = {
        p: s
        for p, s in watchdog.descendants(driver.pid).items()
        if "crl.orchestration.watchdog" not in Path(f"/proc/{p}/cmdline").read_text()
    }
    assert started
    driver.kill()
    driver.wait()
    deadline = time.monotonic() + 30
    alive = started
    while time.monotonic() < deadline and alive:
        time.sleep(0.5)
        alive = {
            p: s
            for p, s in started.items()
            if watchdog._stat(p) not in (None,) and watchdog._stat(p)[1] == s
        }
    assert not alive, [Path(f"/proc/{p}/cmdline").read_bytes()[:80] for p in alive]
    deadline = time.monotonic() + 15
    folders = [1]
    while time.monotonic() < deadline and folders:
        time.sleep(0.5)
        folders = list(Path(tempfile.gettempdir()).glob(f"crl-ray-{driver.pid}-*"))
    assert folders == []  # and the private Ray's folders are gone


def test_a_changed_user_file_is_recomputed_not_reused(tmp_path: Path) -> None:
    """The issue's scenario: run on emb.parquet, overwrite it with other embeddings, run again:
    the second run computes its cells in a new folder (one line says why) and its tables hold
    the new file's numbers."""

    def write_embeddings(seed: int, scale: float) -> None:
        rng = __import__("numpy").random.default_rng(seed)
        pl.DataFrame(
            {"x": (scale * rng.normal(size=(80, 4))).tolist(), "label": [i % 2 for i in range(80)]}
        ).write_parquet(tmp_path / "emb.parquet")

    write_embeddings(0, 1.0)
    tree = dict(SMALL, dataset={"kind": "parquet", "path": str(tmp_path / "emb.parquet")})
    tree["grid"] = dict(SMALL["grid"], n=[20])
    path = write_config(tmp_path, tree)
    run = ("run", str(path), "--out", str(tmp_path / "runs"), "--executor", "local", "--quiet")
    first = crl(*run)
    assert first.returncode == 0, first.stderr[-2000:]
    write_embeddings(1, 5.0)
    second = crl(*run)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "inputs changed since" in second.stderr and "dataset.path" in second.stderr
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 2
    tables = [pl.read_parquet(f / "tables" / "cells.parquet") for f in folders]
    assert tables[0]["inputs"][0] != tables[1]["inputs"][0]
    assert tables[0]["train_loss"].to_list() != tables[1]["train_loss"].to_list()
    _the_catalogue_query_and_diff_follow_them(tmp_path / "runs", folders, tables)


def _the_catalogue_query_and_diff_follow_them(
    runs: Path, folders: list[Path], tables: list[pl.DataFrame]
) -> None:
    """`crl runs`, `crl query` over the folder of runs, `crl diff` and the formats, on the two
    runs of the changed-input scenario."""
    import json

    listed = crl("runs", "--out", str(runs), "--format", "json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    entries = {e["run_id"]: e for e in json.loads(listed.stdout)}
    assert set(entries) == {f.name for f in folders}
    for folder, table in zip(folders, tables, strict=True):
        entry = entries[folder.name]
        assert entry["status"] == "complete" and entry["kind"] == "grid"
        assert entry["cells_done"] == entry["cells_total"] == table.height
        assert entry["cells_failed"] == 0
        assert json.loads(entry["inputs"]) == json.loads(table["inputs"][0])
        assert entry["git_commit"] == table["git_commit"][0]
    sql = "select run_id, avg(train_loss) as loss, count(*) as cells from cells group by run_id"
    union = crl("query", str(runs), sql, "--format", "csv")
    assert union.returncode == 0, union.stderr[-2000:]
    frame = pl.read_csv(__import__("io").StringIO(union.stdout)).sort("run_id")
    assert frame["run_id"].to_list() == sorted(f.name for f in folders)
    expected = sorted(
        (f.name, t["train_loss"].mean()) for f, t in zip(folders, tables, strict=True)
    )
    assert frame["loss"].to_list() == pytest.approx([loss for _, loss in expected], rel=1e-12)
    target = runs.parent / "union.parquet"
    saved = crl(
        "query", str(runs), "select * from summary", "--format", "parquet", "-o", str(target)
    )
    assert saved.returncode == 0 and pl.read_parquet(target)["run_id"].n_unique() == 2
    refused = crl("query", str(runs), "select 1", "--format", "parquet")
    _one_line_exit_2(refused, "-o FILE")
    moved = crl("diff", str(folders[0]), str(folders[1]), "--format", "json")
    assert moved.returncode == 0, moved.stderr[-2000:]
    rows = json.loads(moved.stdout)
    summaries = [pl.read_parquet(f / "tables" / "summary.parquet") for f in folders]
    assert len(rows) == summaries[0].height
    first = rows[0]
    assert first["gap_change"] == pytest.approx(first["gap_b"] - first["gap_a"])
    assert first["gap_a"] == pytest.approx(summaries[0]["gap_mean"][0])
