"""Prefect artifacts of a run, so the Prefect UI shows results and not only states: a table of
the summary (gap and bounds per cell key, or slack per statement) and a markdown page with the
headline numbers, where the tables and the report live, and how the numbers moved against the
previous run: of the same deployment for a deployment's run (its flow runs are recorded in the
run folders, crl.steps.catalogue), else of the same config name."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from crl.steps import catalogue, store

GRID_COLUMNS = [
    "regime",
    "loss",
    "m",
    "n",
    "seeds",
    "gap_mean",
    "gamma_m_mean",
    "gamma_S_mean",
    "gamma_E_mean",
    "best_bound_mean",
    "gamma_S_holds_fraction",
    "retrieval_auc_mean",
]


@dataclass(frozen=True)
class FlowRun:
    """The Prefect flow run a run is part of, and its deployment (None: run by hand)."""

    flow_run_id: str
    deployment_id: str | None
    deployment: str | None


def current_flow_run() -> FlowRun:
    """The flow run this code runs in (prefect.runtime); its deployment as `prefect deployment
    run` names it (flow/deployment)."""
    from prefect.runtime import deployment, flow_run

    name = f"{flow_run.flow_name}/{deployment.name}" if deployment.id else None
    return FlowRun(str(flow_run.id), deployment.id, name)


def change_section(run_dir: Path, result: dict, flow: FlowRun | None) -> list[str]:
    """Markdown lines: how the run moved against the previous run of its deployment (in this
    folder or another), or, run by hand, against the latest other run of its config name. In an
    object store, the other runs' records and summaries are downloaded first."""
    wanted = {(catalogue.FLOW_RUNS,), ("tables", "summary.parquet")}
    store.pull(run_dir.parent, lambda parts: parts[1:] in wanted)
    if flow is not None and flow.deployment_id is not None:
        found = catalogue.previous_flow_run(run_dir.parent, flow.deployment_id, flow.flow_run_id)
        if found is None:
            return [f"- no earlier run of deployment `{flow.deployment}` under `{run_dir.parent}`"]
        folder, record = found
        head = (
            f"- the previous run of deployment `{flow.deployment}`: flow run "
            f"`{record['flow_run_id']}`, finished {record['finished']}"
        )
        if folder == run_dir:
            return [
                f"{head}, in this run folder: the config and its inputs are unchanged",
                f"  - {result['cells_skipped']} cells reused, {result['cells_computed']} computed",
            ]
        return [f"{head}, in `{folder.name}`", *catalogue.change_lines(folder, run_dir)]
    previous = catalogue.previous_run(run_dir)
    if previous is None:
        return ["- no earlier run of this config name beside it"]
    return catalogue.change_lines(previous, run_dir)


def _json_rows(frame: pl.DataFrame) -> list[dict]:
    """Rows with NaN as None: artifacts travel as JSON."""
    return [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
        for r in frame.iter_rows(named=True)
    ]


def publish_grid(
    run_dir: Path,
    report: str,
    checked: int,
    held: int,
    result: dict,
    flow: FlowRun | None = None,
) -> None:
    """Table artifact `crl-grid-summary` and markdown artifact `crl-grid-run`."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    summary = pl.read_parquet(run_dir / "tables" / "summary.parquet")
    create_table_artifact(
        key="crl-grid-summary",
        table=_json_rows(summary.select([c for c in GRID_COLUMNS if c in summary.columns])),
        description=f"gap and certified bounds per cell key (means over seeds), {run_dir.name}",
    )
    changes = change_section(run_dir, result, flow)
    create_markdown_artifact(
        key="crl-grid-run",
        markdown="\n".join(
            [
                f"# crl run {run_dir.name}",
                f"- run folder: `{store.uri_of(run_dir) or run_dir}`",
                f"- cells: {result['cells_total']} ({result['cells_skipped']} already done, "
                f"{result['cells_computed']} computed, {len(result['failures'])} failed)",
                f"- certified bounds held in {held} of {checked} (cell, bound) pairs",
                f"- tables: `{run_dir / 'tables'}` (cells, summary, fits)",
                f"- report: `{report}`",
                f"- ran on: {result['where']}",
                "## Changes against the previous run"
                + (f" of deployment `{flow.deployment}`" if flow and flow.deployment_id else ""),
                *changes,
            ]
        ),
        description=f"where the tables and the report of {run_dir.name} live",
    )


def publish_checks(run_dir: Path, summary: list[dict], report: str) -> None:
    """Table artifact `crl-checks-summary` and markdown artifact `crl-checks-run`."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    create_table_artifact(
        key="crl-checks-summary",
        table=_json_rows(pl.from_dicts(summary)),
        description=f"slack per statement and method, {run_dir.name}",
    )
    failed = [s["statement"] for s in summary if not s["all_held"]]
    create_markdown_artifact(
        key="crl-checks-run",
        markdown="\n".join(
            [
                f"# crl check {run_dir.name}",
                f"- statements: {len({s['statement'] for s in summary})}, rows: "
                f"{sum(s['rows'] for s in summary)}",
                f"- failed: {', '.join(failed) if failed else 'none'}",
                f"- tables: `{run_dir / 'tables'}` (checks, checks_summary)",
                f"- report: `{report}`",
            ]
        ),
        description=f"headline of {run_dir.name}",
    )
