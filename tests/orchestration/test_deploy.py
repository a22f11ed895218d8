"""Deployments and cluster submission with real services: a Prefect server on 127.0.0.1 with a
process work pool and worker, `crl serve`, and a two-node Ray cluster with token auth."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import polars as pl
import pytest
import yaml

from crl.core import config as crl_config
from crl.core import places
from crl.core.errors import ConfigError, DeployError
from crl.orchestration import deploy, submit
from tests import services
from tests.conftest import REPO
from tests.services import BIN, alive_nodes, free_port, start, stop, wait_for

TINY = {
    "name": "deploy-tiny",
    "seed": 0,
    "dataset": {"kind": "synthetic", "train_size": 300, "test_size": 200, "shards": 2},
    "model": {"steps": 10},
    "grid": {
        "regimes": ["one_negative"],
        "losses": ["hinge"],
        "m": [1],
        "n": [20, 40],
        "seeds": [0],
    },
    "eval": {
        "rademacher_draws": 4,
        "test_anchors": 100,
        "negative_pool": 50,
        "probe_points": 100,
    },
}
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def write_tiny(folder: Path) -> Path:
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


def cells_of(runs: Path) -> pl.DataFrame:
    run_dir = runs / crl_config.validate(TINY).run_id()
    return pl.read_parquet(run_dir / "tables" / "cells.parquet")


# --- fast checks of input handling (no services) -------------------------------------------


def test_parameters_are_checked_and_portable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    params = deploy.flow_parameters(
        "bound_grid", str(REPO / "conf" / "quickstart.yaml"), ["grid.m=[1]"], "runs", None, None
    )
    assert params == {
        "config_path": "conf/quickstart.yaml",
        "overrides": ["grid.m=[1]"],
        "out": "runs",
        "ray_address": None,
        "progress": False,
        "workdir": ".",
    }
    outside = deploy.flow_parameters("theorem_checks", None, [], str(tmp_path / "o"), "auto", 3)
    assert outside["out"] == str(tmp_path / "o") and outside["instances"] == 3
    stored = deploy.flow_parameters("theorem_checks", None, [], "s3://bucket/runs", None, None)
    assert stored["out"] == "s3://bucket/runs"  # an object store, kept as it is
    with pytest.raises(DeployError, match="grid.m"):
        deploy.flow_parameters(
            "bound_grid", "conf/quickstart.yaml", ["grid.m=[0]"], "r", None, None
        )
    with pytest.raises(DeployError, match="instances"):
        deploy.flow_parameters("theorem_checks", None, ["instances=0"], "runs", None, None)
    monkeypatch.chdir(tmp_path)  # made elsewhere: the config's data paths are read there
    made_elsewhere = deploy.flow_parameters(
        "bound_grid", str(REPO / "conf" / "quickstart.yaml"), [], "runs", None, None
    )
    assert made_elsewhere["workdir"] == str(tmp_path.resolve())
    assert made_elsewhere["out"] == str(tmp_path.resolve() / "runs")


def test_job_entrypoint_quotes_and_ships_the_config() -> None:
    entry = submit.job_entrypoint("/data/my runs", ["grid.n=[20, 40]"])
    assert "python -m crl run \"$f\" --out '/data/my runs' --ray-address auto" in entry
    assert "--set 'grid.n=[20, 40]'" in entry
    assert "--out s3://bucket/runs --ray-address" in submit.job_entrypoint("s3://bucket/runs", [])
    env = submit.job_runtime_env("name: x\n", {"A": "1"}, [])
    assert env["working_dir"] == str(REPO) and "/.venv/" in env["excludes"]
    assert env["env_vars"]["CRL_CONFIG_YAML"] == "name: x\n" and env["env_vars"]["A"] == "1"
    assert "pip" not in env


BAD_INPUT = [
    (["deploy", "nope", "--config", "conf/quickstart.yaml"], "FLOW"),
    (["deploy", "--config", "conf/quickstart.yaml", "--cron", "0 3 * *"], "--cron"),
    (["deploy", "--config", "conf/quickstart.yaml", "--timezone", "Mars/Base"], "--timezone"),
    (["deploy", "--config", "conf/quickstart.yaml", "--set", "grid.m=[0]"], "grid.m"),
    (["deploy", "--config", "conf/absent.yaml"], "absent.yaml"),
    (["deploy"], "--config"),
    (["deploy", "--config", "conf/quickstart.yaml"], "PREFECT_API_URL"),
    (["serve", "--config", "conf/quickstart.yaml", "--limit", "0"], "--limit"),
    (["submit", "conf/quickstart.yaml", "--address", "ray://h:10001", "--out", "/o"], "--address"),
    (["submit", "conf/quickstart.yaml", "--address", "http://h:8265", "--out", "o"], "--out"),
    (  # an object store is a valid --out: the unreachable address is what fails
        [
            "submit",
            "conf/quickstart.yaml",
            "--address",
            f"http://127.0.0.1:{free_port()}",
            "--out",
            "s3://bucket/runs",
        ],
        "--address",
    ),
    (
        [
            "submit",
            "conf/quickstart.yaml",
            "--address",
            "http://h:8265",
            "--out",
            "/o",
            "--env",
            "X",
        ],
        "--env",
    ),
    (
        [
            "submit",
            "conf/quickstart.yaml",
            "--address",
            f"http://127.0.0.1:{free_port()}",
            "--out",
            "/o",
        ],
        "--address",
    ),
]


@pytest.mark.parametrize(("args", "named"), BAD_INPUT)
def test_bad_input_exits_2_naming_the_argument(tmp_path: Path, args: list[str], named: str) -> None:
    env = {"PREFECT_HOME": str(tmp_path), "PREFECT_API_URL": ""}
    out = crl_env(args, env)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], out.stderr


def crl_env(args: list[str], extra: dict[str, str], timeout: int = 600):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
    return subprocess.run(
        [sys.executable, "-m", "crl", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --- Prefect: a real server on 127.0.0.1, a process work pool, a worker, `crl serve` ----------


@pytest.fixture(scope="module")
def prefect_server() -> dict:
    """The test session's Prefect server (tests/services.py)."""
    server = services.session_prefect()
    return {"env": server.env, "api": server.api, "folder": server.folder, "log": server.log}


def prefect(args: list[str], env: dict, timeout: int = 120) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [str(BIN / "prefect"), "--no-prompt", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, (args, out.stdout[-3000:], out.stderr[-3000:])
    return out


def deployment(api: str, full_name: str) -> dict | None:
    reply = httpx.get(f"{api}/deployments/name/{full_name}", timeout=10)
    return reply.json() if reply.status_code == 200 else None


def work_once(folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """A Prefect worker of the pool crl-test that runs one scheduled flow run and exits."""
    return subprocess.run(
        [str(BIN / "prefect"), "worker", "start", "--pool", "crl-test", "--run-once"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
    )


def run_page(api: str, run_id: str) -> str:
    """The markdown of the `crl-grid-run` artifact of flow run `run_id`."""
    reply = httpx.post(
        f"{api}/artifacts/filter",
        json={"artifacts": {"key": {"any_": ["crl-grid-run"]}, "flow_run_id": {"any_": [run_id]}}},
        timeout=10,
    )
    [artifact] = reply.json()
    return artifact["data"]


def flow_run_state(api: str, run_id: str) -> str:
    return httpx.get(f"{api}/flow_runs/{run_id}", timeout=10).json()["state"]["type"]


@pytest.mark.slow
def test_deploy_to_process_pool_and_run_with_a_worker(prefect_server: dict, tmp_path: Path) -> None:
    env, api = prefect_server["env"], prefect_server["api"]
    config, runs = write_tiny(tmp_path), tmp_path / "runs"
    prefect(["work-pool", "create", "crl-test", "--type", "process"], env)
    deployed = crl_env(
        [
            "deploy",
            "bound_grid",
            "--config",
            str(config),
            "--name",
            "tiny",
            "--pool",
            "crl-test",
            "--cron",
            "0 3 1 1 *",
            "--timezone",
            "Europe/Paris",
            "--out",
            str(runs),
        ],
        env,
    )
    assert deployed.returncode == 0, deployed.stderr[-3000:]
    assert "bound_grid/tiny" in deployed.stdout
    record = deployment(api, "bound_grid/tiny")
    assert record is not None and record["work_pool_name"] == "crl-test"
    assert record["parameters"]["config_path"] == str(config)
    assert record["parameters"]["out"] == str(runs)
    [schedule] = record["schedules"]
    assert schedule["schedule"]["cron"] == "0 3 1 1 *"
    assert schedule["schedule"]["timezone"] == "Europe/Paris"
    assert record["pull_steps"][0]["prefect.deployments.steps.set_working_directory"] == {
        "directory": str(REPO)
    }

    triggered = prefect(["deployment", "run", "bound_grid/tiny"], env)
    run_id = UUID.search(triggered.stdout).group(0)
    worker = work_once(tmp_path, env)
    assert worker.returncode == 0, worker.stdout[-3000:] + worker.stderr[-3000:]
    assert flow_run_state(api, run_id) == "COMPLETED", worker.stdout[-3000:]
    cells = cells_of(runs)
    assert cells.height == 2 and sorted(cells["n"]) == [20, 40]
    assert "no earlier run of deployment `bound_grid/tiny`" in run_page(api, run_id)

    # the next scheduled run: compared with the previous run of the same deployment
    again = UUID.search(prefect(["deployment", "run", "bound_grid/tiny"], env).stdout).group(0)
    worker = work_once(tmp_path, env)
    assert flow_run_state(api, again) == "COMPLETED", worker.stdout[-3000:]
    page = run_page(api, again)
    assert f"flow run `{run_id}`" in page and "in this run folder" in page
    assert "2 cells reused, 0 computed" in page
    [folder] = [p for p in runs.iterdir() if p.is_dir()]
    records = json.loads((folder / "flow_runs.json").read_text())
    assert [r["flow_run_id"] for r in records] == [run_id, again]
    assert {r["deployment"] for r in records} == {"bound_grid/tiny"}


@pytest.mark.slow
def test_serve_runs_a_triggered_flow_run(prefect_server: dict, tmp_path: Path) -> None:
    env, api = prefect_server["env"], prefect_server["api"]
    config, runs = write_tiny(tmp_path), tmp_path / "runs"
    served = start(
        [
            sys.executable,
            "-m",
            "crl",
            "serve",
            "bound_grid",
            "--config",
            str(config),
            "--name",
            "tiny-served",
            "--cron",
            "0 3 1 1 *",
            "--out",
            str(runs),
        ],
        env,
        tmp_path / "serve.log",
    )
    try:
        wait_for(
            "crl serve", lambda: deployment(api, "bound_grid/tiny-served") is not None, 120, served
        )
        triggered = prefect(["deployment", "run", "bound_grid/tiny-served"], env)
        run_id = UUID.search(triggered.stdout).group(0)
        wait_for(
            "served flow run",
            lambda: flow_run_state(api, run_id) in {"COMPLETED", "FAILED", "CRASHED"},
            420,
            served,
        )
        assert flow_run_state(api, run_id) == "COMPLETED", (tmp_path / "serve.log").read_text()
        assert cells_of(runs).height == 2

        # the probe: a run's parameters added a dense section whose backbone is os:system
        marker = tmp_path / "ran"
        dense = {
            "images": {"kind": "shapes", "size": 16, "train_size": 8, "test_size": 4},
            "views": {"size": 8},
            "grid": {"m": [2], "n": [4]},
            "backbone": {
                "kind": "module",
                "module": "os:system",
                "module_kwargs": {"command": f"touch {marker}"},
            },
        }
        params = json.dumps({"overrides": [f"dense={json.dumps(dense)}"]})
        triggered = prefect(
            ["deployment", "run", "bound_grid/tiny-served", "--params", params], env
        )
        run_id = UUID.search(triggered.stdout).group(0)
        wait_for(
            "refused flow run",
            lambda: flow_run_state(api, run_id) in {"COMPLETED", "FAILED", "CRASHED"},
            300,
            served,
        )
        state = httpx.get(f"{api}/flow_runs/{run_id}", timeout=10).json()["state"]
        assert state["type"] == "FAILED", state
        assert "--allow-module-overrides" in state["message"], state["message"]
        assert not marker.exists()
    finally:
        stop(served, sig=signal.SIGINT)


CODE_OVERRIDES = [
    "dense.backbone.kind=module",
    "dense.backbone.module=os:system",
    "dense.backbone.module_kwargs={command: 'touch /nonexistent/x'}",
]


@pytest.mark.slow
def test_run_parameters_name_code_only_where_the_deployment_opted_in(
    prefect_server: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    quickstart = str(REPO / "conf" / "quickstart.yaml")
    named = crl_config.load(quickstart, CODE_OVERRIDES)
    other = ["grid.m=[1]", "dense.backbone.seed=3"]
    assert crl_config.overrides_naming_code(named, CODE_OVERRIDES) == [
        "dense.backbone.kind",
        "dense.backbone.module",
        "dense.backbone.module_kwargs",
    ]
    assert crl_config.overrides_naming_code(crl_config.load(quickstart, other), other) == []
    with temporary_settings(updates={PREFECT_API_URL: prefect_server["api"]}):
        with get_client(sync_client=True) as client:
            flow_id = client.create_flow_from_name("bound_grid")
            plain = client.create_deployment(flow_id=flow_id, name="plain", tags=["crl"])
            opted = client.create_deployment(
                flow_id=flow_id, name="opted", tags=["crl", deploy.MODULE_OVERRIDES_TAG]
            )
        deploy.check_code_overrides(named, CODE_OVERRIDES)  # `crl run`: the user's own command
        monkeypatch.setenv("PREFECT__RUNTIME__DEPLOYMENT__ID", str(plain))
        with pytest.raises(ConfigError, match="dense.backbone.module.*--allow-module-overrides"):
            deploy.check_code_overrides(named, CODE_OVERRIDES)
        deploy.check_code_overrides(crl_config.load(quickstart, other), other)
        monkeypatch.setenv("PREFECT__RUNTIME__DEPLOYMENT__ID", str(opted))
        deploy.check_code_overrides(named, CODE_OVERRIDES)
    with pytest.raises(DeployError, match="--set dense.backbone.kind"):
        deploy.flow_parameters("bound_grid", quickstart, CODE_OVERRIDES, "runs", None, None)
    allowed = deploy.flow_parameters(
        "bound_grid", quickstart, CODE_OVERRIDES, "runs", None, None, allow_module_overrides=True
    )
    assert allowed["overrides"] == CODE_OVERRIDES


@pytest.mark.slow
def test_prefect_yaml_registers_with_prefect_deploy(prefect_server: dict) -> None:
    env, api = prefect_server["env"], prefect_server["api"]
    spec = yaml.safe_load((REPO / "infra" / "prefect" / "prefect.yaml").read_text())
    names = {d["name"]: d for d in spec["deployments"]}
    assert {d["entrypoint"] for d in spec["deployments"]} == set(deploy.FLOW_ENTRYPOINTS.values())
    pool = names["quickstart"]["work_pool"]["name"]
    prefect(["work-pool", "create", pool, "--type", "process", "--overwrite"], env)
    prefect(["deploy", "--prefect-file", "infra/prefect/prefect.yaml", "--all"], env)
    record = deployment(api, "bound_grid/quickstart")
    assert record is not None and record["parameters"]["config_path"] == "conf/quickstart.yaml"
    assert record["schedules"][0]["schedule"]["cron"] == names["quickstart"]["schedules"][0]["cron"]
    weekly = deployment(api, "theorem_checks/weekly")
    assert weekly is not None and weekly["parameters"]["config_path"] == "conf/checks.yaml"


@pytest.mark.slow
def test_deploy_theorem_checks(prefect_server: dict) -> None:
    env, api = prefect_server["env"], prefect_server["api"]
    prefect(["work-pool", "create", "crl-checks", "--type", "process"], env)
    args = ["deploy", "theorem_checks", "--config", "conf/checks.yaml", "--pool", "crl-checks"]
    deployed = crl_env([*args, "--instances", "5", "--cron", "0 4 * * 0", "--paused"], env)
    assert deployed.returncode == 0, deployed.stderr[-3000:]
    record = deployment(api, "theorem_checks/checks")
    assert record is not None and record["paused"]
    assert record["parameters"] == {
        "config_path": "conf/checks.yaml",
        "out": "runs",
        "instances": 5,
        "ray_address": None,
        "progress": False,
        "overrides": [],
    }
    missing = crl_env([*args[:-2], "--pool", "absent"], env)
    assert missing.returncode == 2 and "prefect work-pool create absent" in missing.stderr


# --- Ray: a two-node cluster on 127.0.0.1 with token auth, `crl submit --wait` ----------------


@pytest.mark.slow
def test_submit_to_a_two_node_cluster(ray_cluster: dict, tmp_path: Path) -> None:
    wait_for("two nodes", lambda: alive_nodes(ray_cluster) == 2, 60)
    config, runs = write_tiny(tmp_path), tmp_path / "runs"
    args = ["submit", str(config), "--address", ray_cluster["address"], "--out", str(runs)]

    no_token = crl_env(args, {"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN": ""})
    assert no_token.returncode == 2 and "RAY_AUTH_MODE=token" in no_token.stderr, no_token.stderr

    done = crl_env([*args, "--wait"], ray_cluster["env"], timeout=480)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert "SUCCEEDED" in done.stdout and "crl: 2 cells" in done.stdout
    cells = cells_of(runs)
    assert cells.height == 2 and sorted(cells["n"]) == [20, 40]


def test_a_submitted_config_names_its_data_where_the_user_typed_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    plain = tmp_path / "plain.yaml"
    plain.write_text("name: x  # kept as written\n")
    assert submit.shipped_config(str(plain)) == plain.read_text()
    named = tmp_path / "named.yaml"
    named.write_text("name: x\ndataset: {kind: parquet, path: data/x.parquet}\n")
    tree = yaml.safe_load(submit.shipped_config("named.yaml"))
    assert tree["dataset"]["path"] == str(tmp_path / "data" / "x.parquet")
    assert places.resolved_overrides(["dense.images.path=img", "grid.m=[1]", "x.path=s"]) == [
        f"dense.images.path={tmp_path / 'img'}",
        "grid.m=[1]",
        "x.path=s",
    ]
    assert places.resolved_overrides(["dataset.path=s3://b/x"]) == ["dataset.path=s3://b/x"]
