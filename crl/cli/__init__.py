"""The `crl` command: run, check, report, bench here; runs, query, diff in crl.cli.runs; deploy,
serve, submit in crl.cli.deploy. Bad input exits 2 with one line."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from crl.cli.app import app, example, fail, local_place, readable_parquet


def _run_dir(run: str, out: str) -> Path:
    path = local_place(run, out)
    if not (path / "tables").is_dir():
        fail(f"run {run}: no tables folder at {path / 'tables'}")
    return path


@contextmanager
def _interruptible() -> Iterator[None]:
    """Ctrl-C or SIGTERM: one line on how to resume, then exit 130 at once. Finished units are
    files, so the same command resumes; the watchdog started with the run stops Prefect's server
    and the private Ray (waiting on them here can hang on, or crash in, Ray's core worker)."""
    import signal

    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    except KeyboardInterrupt:
        from crl.orchestration import runtime

        again = shlex.join(["crl", *sys.argv[1:]])
        sys.stderr.write(f"\ncrl: interrupted; finished work is kept; rerun `{again}` to resume\n")
        sys.stderr.flush()
        runtime.forget_private_ray()
        os._exit(130)  # Prefect's and Ray's teardown would wait on processes being stopped
    finally:
        signal.signal(signal.SIGTERM, previous)


def _say_stored(root: Path) -> None:
    """Where a run in a store keeps its objects (the paths above are its local mirror)."""
    from crl.steps import store

    uri = store.uri_of(root)
    if uri is not None:
        typer.echo(f"crl: stored  {uri}/ (the paths above are its local mirror)")


@app.command(epilog=example("crl run conf/quickstart.yaml --set grid.m=[1,4,16]"))
def run(
    config: Annotated[str, typer.Argument(help="YAML config, e.g. conf/quickstart.yaml")],
    out: Annotated[str, typer.Option(help="folder that holds run folders")] = "runs",
    set_: Annotated[
        list[str], typer.Option("--set", help="override: dotted.key=value (YAML)")
    ] = [],  # noqa: B006
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster address (else RAY_ADDRESS, else a local Ray)")
    ] = None,
    quiet: Annotated[bool, typer.Option(help="no progress bar")] = False,
    executor: Annotated[
        str, typer.Option(help="ray (default) or local: every step in this process, no Ray")
    ] = "ray",
    recompute_stale: Annotated[
        bool, typer.Option(help="recompute finished cells computed at another git commit")
    ] = False,
) -> None:
    """Run (or resume) the Prefect flow bound_grid over the config's (m, n) grid."""
    from crl.core.errors import ConfigError
    from crl.orchestration import local_prefect, runtime, watchdog
    from crl.orchestration.executor import EXECUTORS

    try:
        if executor not in EXECUTORS:
            raise ConfigError(f"--executor {executor}: expected one of {list(EXECUTORS)}")
        runtime.check_address(ray_address or os.environ.get("RAY_ADDRESS"))
        local_prefect.prefect_local_env()
    except ConfigError as err:
        fail(str(err))
    watchdog.start()  # stops Prefect's server and Ray should this process be killed
    # Prefect's local server starts first: its 4-5 s overlap the checks and imports below. A
    # check that fails stops it at exit (it has written nothing of the run).
    prefect_ready = local_prefect.start_server()
    with _interruptible():
        try:
            from crl.core.places import resolved
            from crl.steps.runfolder import prepare_run

            # every check before work, once: the flow takes the prepared run
            local = runtime.is_local(ray_address)
            prepare_run(config, list(set_), resolved(out), None, local, hand_over=True)
            from crl.orchestration.flows import bound_grid

            prefect_ready()
            result = bound_grid(
                config, list(set_), out, ray_address, not quiet, executor, recompute_stale
            )
        except ConfigError as err:
            fail(str(err))
    tables = Path(result["run_dir"]) / "tables"
    typer.echo(
        f"crl: {result['cells_total']} cells ({result['cells_skipped']} already done, "
        f"{result['cells_computed']} computed, {len(result['failures'])} failed) "
        f"on {result['where']}"
    )
    typer.echo(
        f"crl: inequalities held in {result['bounds_held']} of {result['bounds_checked']} "
        "(cell, inequality) pairs: the certified bounds, Li et al.'s calibration in paired "
        "Gaussian cells, and the MI estimate below log(1 + m) in dense cells"
    )
    stages = " | ".join(f"{k} {v:.1f}" for k, v in result["stage_seconds"].items())
    typer.echo(f"crl: wall seconds by stage: {stages}")
    if result["report"]:
        names = ",".join(sorted(p.stem for p in Path(tables).glob("*.parquet")))
        typer.echo(f"crl: tables  {tables}/{{{names}}}.parquet")
        typer.echo(f"crl: report  {result['report']}")
    _say_stored(Path(result["run_dir"]))
    if result["failures"]:
        for failure in result["failures"]:
            typer.echo(
                f"crl: cell {failure['cell_id']} {failure['key']} failed: {failure['error']}",
                err=True,
            )
        typer.echo(f"crl: failures recorded in {tables / 'failures.parquet'}", err=True)
        raise typer.Exit(1)


@app.command(epilog=example("crl check conf/checks.yaml --instances 20"))
def check(
    config: Annotated[
        str | None, typer.Argument(help="check config, e.g. conf/checks.yaml")
    ] = None,
    out: Annotated[str, typer.Option(help="folder that holds run folders")] = "runs",
    instances: Annotated[int | None, typer.Option(help="instances per statement")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="override: key=value")] = [],  # noqa: B006
    ray_address: Annotated[str | None, typer.Option(help="Ray cluster address")] = None,
    quiet: Annotated[bool, typer.Option(help="no progress bar")] = False,
    executor: Annotated[
        str, typer.Option(help="ray (default) or local: every step in this process, no Ray")
    ] = "ray",
) -> None:
    """Verify every statement of the sources on generated instances (flow theorem_checks)."""
    from crl.core.errors import ConfigError
    from crl.core.places import resolved
    from crl.orchestration import local_prefect, runtime, watchdog
    from crl.orchestration.executor import EXECUTORS
    from crl.steps.runfolder import prepare_check_run

    try:
        if executor not in EXECUTORS:
            raise ConfigError(f"--executor {executor}: expected one of {list(EXECUTORS)}")
        # every check before work, once: the flow takes the prepared run
        prepare_check_run(config, list(set_), instances, resolved(out), hand_over=True)
        runtime.check_address(ray_address or os.environ.get("RAY_ADDRESS"))
        local_prefect.prefect_local_env()
    except ConfigError as err:
        fail(str(err))
    watchdog.start()  # stops Prefect's server and Ray should this process be killed
    prefect_ready = local_prefect.start_server()
    with _interruptible():
        from crl.orchestration.flows import theorem_checks

        try:
            prefect_ready()
        except ConfigError as err:
            fail(str(err))
        result = theorem_checks(
            config, out, instances, ray_address, not quiet, list(set_), executor
        )
    failed = [s for s in result["summary"] if not s["all_held"]]
    for s in result["summary"]:
        typer.echo(
            f"{s['statement']:<24} {s['method']:<11} instances {s['instances']:>4}  "
            f"min slack {s['min_slack']:+.3g}  median {s['median_slack']:+.3g}  "
            f"{'held' if s['all_held'] else 'FAILED'}"
        )
    typer.echo(f"crl: tables  {result['run_dir']}/tables/{{checks,checks_summary}}.parquet")
    typer.echo(f"crl: report  {result['report']}")
    _say_stored(Path(result["run_dir"]))
    if failed:
        import polars as pl

        rows = pl.read_parquet(Path(result["run_dir"]) / "tables" / "checks.parquet")
        for row in rows.filter(~pl.col("holds")).head(20).iter_rows(named=True):
            typer.echo(
                f"crl: FAILED {row['statement']} instance {row['instance']} ({row['quantity']}): "
                f"lhs {row['lhs']:.6g} > rhs {row['rhs']:.6g} beyond ci {row['ci']:.3g}; "
                f"params {row['params']}",
                err=True,
            )
        raise typer.Exit(1)


@app.command(epilog=example("crl report runs/quickstart-<hash>"))
def report(
    run: Annotated[str, typer.Argument(help="run folder (or run id under --out)")],
    out: Annotated[str, typer.Option(help="folder that holds run folders")] = "runs",
) -> None:
    """Rebuild the report (plots and index.html) from the run's tables alone."""
    root = _run_dir(run, out)
    tables = root / "tables"
    if (tables / "checks.parquet").is_file():
        needed = ["checks", "checks_summary"]
    elif (tables / "summary.parquet").is_file() and (tables / "fits.parquet").is_file():
        needed = ["summary", "fits"]
    else:
        fail(f"run {run}: {tables} holds no summary/fits or checks tables to report from")
    for name in needed:
        readable_parquet(tables / f"{name}.parquet")
    with _interruptible():
        from crl.steps import check_report
        from crl.steps import report as crl_report

        if needed[0] == "checks":
            page = check_report.build_checks(tables, root / "report", root / ".staging")
        else:
            page, _ = crl_report.build_if_changed(
                tables, root / "report", root / ".staging", force=True
            )
    typer.echo(f"crl: report  {page}")
    _say_stored(root)


BENCHES = {
    "kernels": [
        "bench/kernels_losses.py",
        "bench/kernels_scores.py",
        "bench/dense_loss.py",
        "bench/kernels_rademacher.py",
    ],
    "pipeline": ["bench/pipeline.py"],
    "bounds": ["bench/bounds_share.py"],
    "dense": ["bench/dense_loss.py"],
    "gpu": ["bench/gpu.py"],
    "pretrain": ["bench/pretrain_overhead.py"],
    "ladder": ["bench/ladder_cell.py"],
}


@app.command(epilog=example("crl bench kernels"))
def bench(
    which: Annotated[str, typer.Argument(help=" | ".join(BENCHES))] = "kernels",
) -> None:
    """Benchmarks that print ratios against references measured in the same run."""
    import subprocess

    from crl.orchestration.runtime import REPO

    if which not in BENCHES:
        fail(f"bench {which!r}: expected one of {sorted(BENCHES)}")
    for script in BENCHES[which]:
        typer.echo(f"== {script}")
        code = subprocess.run([sys.executable, str(REPO / script)], cwd=REPO).returncode
        if code:
            raise typer.Exit(code)


def main() -> None:
    sys.exit(app())


from crl.cli import deploy as _deploy_commands  # noqa: E402,F401  (registers deploy/serve/submit)
from crl.cli import docs as _docs_commands  # noqa: E402,F401  (registers docs tables)
from crl.cli import runs as _runs_commands  # noqa: E402,F401  (registers runs/query/diff)
