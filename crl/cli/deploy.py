"""`crl deploy`, `crl serve`, `crl submit`: scheduled Prefect deployments and Ray job submission."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from crl.cli.app import app, example, fail
from crl.core.errors import DeployError

FlowArg = Annotated[str, typer.Argument(help="bound_grid or theorem_checks")]
NameOpt = Annotated[
    str | None,
    typer.Option(help="deployment name (default: the config's file stem, else 'default')"),
]
ConfigOpt = Annotated[
    str | None, typer.Option(help="YAML config (bound_grid: required, e.g. conf/quickstart.yaml)")
]
SetOpt = Annotated[list[str], typer.Option("--set", help="override: dotted.key=value (YAML)")]
OutOpt = Annotated[str, typer.Option(help="folder that holds run folders")]
RayOpt = Annotated[
    str | None, typer.Option(help="Ray cluster address for the runs (default: a local Ray)")
]
InstancesOpt = Annotated[int | None, typer.Option(help="theorem_checks: instances per check")]
CronOpt = Annotated[str, typer.Option(help="cron schedule")]
TimezoneOpt = Annotated[str, typer.Option(help="IANA time zone of the cron schedule")]
WaitOpt = Annotated[bool, typer.Option(help="follow the logs; exit with the job's code")]
PausedOpt = Annotated[bool, typer.Option(help="create the deployment with its schedule paused")]
ModuleOverridesOpt = Annotated[
    bool,
    typer.Option(
        help="let run parameters name the code a run imports (dense.backbone.module): anyone who "
        "may start a run of this deployment may then run code on its workers"
    ),
]


def _default_name(name: str | None, config: str | None) -> str:
    return name or (Path(config).stem if config else "default")


@app.command(
    epilog=example('crl deploy bound_grid --config conf/quickstart.yaml --cron "0 3 * * *"')
)
def deploy(
    flow: FlowArg = "bound_grid",
    config: ConfigOpt = None,
    name: NameOpt = None,
    pool: Annotated[str, typer.Option(help="Prefect process work pool")] = "crl",
    cron: CronOpt = "0 3 * * *",
    timezone: TimezoneOpt = "UTC",
    set_: SetOpt = [],  # noqa: B006
    out: OutOpt = "runs",
    ray_address: RayOpt = None,
    instances: InstancesOpt = None,
    paused: PausedOpt = False,
    allow_module_overrides: ModuleOverridesOpt = False,
) -> None:
    """Create or update a scheduled Prefect deployment of FLOW on PREFECT_API_URL."""
    from crl.orchestration import deploy as deploy_flows

    try:
        params = deploy_flows.flow_parameters(
            flow, config, set_, out, ray_address, instances, allow_module_overrides
        )
        schedule = deploy_flows.check_schedule(cron, timezone)
        done = deploy_flows.deploy(
            flow,
            _default_name(name, config),
            pool,
            schedule,
            params,
            paused,
            allow_module_overrides,
        )
    except DeployError as err:
        fail(str(err))
    state = "paused" if paused else "active"
    typer.echo(
        f"crl: deployment {done.full_name} on pool {done.pool!r}, "
        f"cron {cron!r} {timezone} ({state})"
    )
    typer.echo(f"crl: worker   prefect worker start --pool {done.pool}")
    typer.echo(f"crl: run now  prefect deployment run '{done.full_name}'")
    if done.url:
        typer.echo(f"crl: UI       {done.url}")


@app.command(epilog=example("crl serve bound_grid --config conf/quickstart.yaml"))
def serve(
    flow: FlowArg = "bound_grid",
    config: ConfigOpt = None,
    name: NameOpt = None,
    cron: CronOpt = "0 3 * * *",
    timezone: TimezoneOpt = "UTC",
    set_: SetOpt = [],  # noqa: B006
    out: OutOpt = "runs",
    ray_address: RayOpt = None,
    instances: InstancesOpt = None,
    paused: PausedOpt = False,
    limit: Annotated[int, typer.Option(help="flow runs at a time")] = 1,
    allow_module_overrides: ModuleOverridesOpt = False,
) -> None:
    """Serve a scheduled deployment of FLOW from this process (no work pool) until Ctrl-C."""
    from crl.orchestration import deploy as deploy_flows

    if limit < 1:
        fail(f"--limit: must be at least 1 (got {limit})")
    try:
        params = deploy_flows.flow_parameters(
            flow, config, set_, out, ray_address, instances, allow_module_overrides
        )
        schedule = deploy_flows.check_schedule(cron, timezone)
        deploy_flows.serve(
            flow,
            _default_name(name, config),
            schedule,
            params,
            paused,
            limit,
            allow_module_overrides,
        )
    except DeployError as err:
        fail(str(err))


@app.command(
    epilog=example(
        "crl submit conf/quickstart.yaml --address http://HEAD:8265 --out /data/crl/runs --wait"
    )
)
def submit(
    config: Annotated[str, typer.Argument(help="YAML config, e.g. conf/quickstart.yaml")],
    address: Annotated[str, typer.Option(help="the cluster's job API, e.g. http://HEAD:8265")],
    out: Annotated[
        str,
        typer.Option(
            help="absolute folder on the cluster, on storage every node mounts, or s3://..."
        ),
    ],
    set_: SetOpt = [],  # noqa: B006
    wait: WaitOpt = False,
    env: Annotated[
        list[str], typer.Option(help="KEY=VALUE for the job (e.g. PREFECT_API_URL=...)")
    ] = [],  # noqa: B006
    pip: Annotated[list[str], typer.Option(help="pip requirement to install for the job")] = [],  # noqa: B006
) -> None:
    """Run (or resume) CONFIG on a Ray cluster as a Ray job (`crl run` on the cluster)."""
    from crl.orchestration import submit as submit_jobs

    try:
        job = submit_jobs.submit(config, set_, address, out, submit_jobs.parse_env(env), pip)
    except DeployError as err:
        fail(str(err))
    typer.echo(f"crl: submitted job {job.submission_id} to {job.address}")
    if not wait:
        typer.echo(f"crl: logs    ray job logs --address {job.address} -f {job.submission_id}")
        typer.echo(f"crl: status  ray job status --address {job.address} {job.submission_id}")
        return
    try:
        code = submit_jobs.follow(
            job.address, job.submission_id, lambda text: typer.echo(text, nl=False)
        )
    except KeyboardInterrupt:
        typer.echo(
            f"\ncrl: stopped following; the job goes on "
            f"(ray job stop --address {job.address} {job.submission_id})",
            err=True,
        )
        raise typer.Exit(130) from None
    except DeployError as err:
        fail(str(err), code=1)
    status, message = submit_jobs.job_status(job.address, job.submission_id)
    typer.echo(f"crl: job {job.submission_id} {status}" + (f": {message}" if code else ""))
    raise typer.Exit(code)
