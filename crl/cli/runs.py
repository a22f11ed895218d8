"""`crl runs`, `crl query`, `crl diff`: the tables of one run or of a folder of runs, for people
(`--format table`) and for scripts (csv, json, parquet)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from crl.cli.app import app, example, fail, local_out, local_place, readable_parquet

FORMATS = ("table", "csv", "json", "parquet")


def emit(frame, fmt: str, output: str | None, rows: int) -> None:
    """Print `frame` (table: up to `rows` rows), or write it to `output` / stdout as csv, json
    (records) or parquet (which needs -o)."""
    import polars as pl

    if fmt not in FORMATS:
        fail(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "parquet" and output is None:
        fail("--format parquet: give the file with -o FILE")
    if fmt == "table":
        with pl.Config(tbl_rows=rows, tbl_cols=-1, tbl_width_chars=200, fmt_str_lengths=40):
            text = str(frame)
        if output is None:
            typer.echo(text)
        else:
            Path(output).write_text(text + "\n")
        return
    if fmt == "parquet":
        frame.write_parquet(output)
        return
    text = frame.write_csv() if fmt == "csv" else frame.write_json()
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        Path(output).write_text(text)


Format = Annotated[str, typer.Option("--format", help=" | ".join(FORMATS))]
Output = Annotated[str | None, typer.Option("-o", "--output", help="write to FILE")]
Rows = Annotated[int, typer.Option(help="rows to print (table format)")]
Out = Annotated[str, typer.Option(help="folder that holds run folders")]


def _folders(run: str, out: str) -> list[Path]:
    from crl.steps.catalogue import run_folders

    path = local_place(run, out)
    folders = run_folders(path)
    if not folders:
        fail(f"run {run}: no tables folder at {path / 'tables'} nor in any folder under {path}")
    return folders


@app.command(epilog=example("crl runs --format csv"))
def runs(
    out: Out = "runs",
    fmt: Format = "table",
    output: Output = None,
    rows: Rows = 200,
) -> None:
    """The runs under --out: config hash, inputs, version and commit, times, cells, status."""
    from crl.steps.catalogue import catalogue

    folder = local_out(out)
    if not folder.is_dir():
        fail(f"--out {out}: not a folder")
    emit(catalogue(folder), fmt, output, rows)


@app.command(
    epilog=example('crl query runs "select run_id, regime, avg(gap) from cells group by 1, 2"')
)
def query(
    run: Annotated[str, typer.Argument(help="run folder, run id under --out, or a folder of runs")],
    sql: Annotated[
        str, typer.Argument(help='e.g. "select regime, avg(gap) from cells group by regime"')
    ],
    out: Out = "runs",
    rows: Rows = 50,
    fmt: Format = "table",
    output: Output = None,
) -> None:
    """Polars SQL over the run's tables (cells, summary, fits, and failures/checks when present);
    over a folder of runs, each table is the union of every run's (told apart by run_id)."""
    import polars as pl

    from crl.steps.catalogue import union

    context = pl.SQLContext(union(_folders(run, out)))
    try:
        frame = context.execute(sql, eager=True)
    except Exception as err:  # Polars raises several error types for bad SQL or files
        fail(f"query: {str(err).splitlines()[0]}")
    emit(frame, fmt, output, rows)


@app.command(epilog=example("crl diff runs/<run A> runs/<run B>"))
def diff(
    run_a: Annotated[str, typer.Argument(help="the earlier run (folder or run id)")],
    run_b: Annotated[str, typer.Argument(help="the later run (folder or run id)")],
    out: Out = "runs",
    fmt: Format = "table",
    output: Output = None,
    rows: Rows = 200,
) -> None:
    """How the gap, bounds, certificates and signal moved from run A to run B, per grid point."""
    import polars as pl

    from crl.steps.catalogue import diff as diff_tables

    frames = []
    for run in (run_a, run_b):
        folder = _folders(run, out)
        path = folder[0] / "tables" / "summary.parquet"
        if len(folder) != 1 or not path.is_file():
            fail(f"run {run}: expected one run folder with tables/summary.parquet")
        readable_parquet(path)
        frames.append(pl.read_parquet(path))
    emit(diff_tables(*frames), fmt, output, rows)
