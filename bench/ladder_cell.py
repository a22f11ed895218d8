"""The certificate ladder's cost on one large cell (not a timed test).

conf/ladder.yaml's (or `--config`'s) scrl InfoNCE cell at T = 0.1 (or `--temperature 1`; a config
without a temperature axis has one), m = 16, seed 0, at each n asked for (`--posterior-steps K`
replaces the ladder's `posterior_steps`), is run
end to end (`crl.steps.unimodal.cell.run_cell`, as the cells stage runs it) twice, each in a
fresh interpreter at two torch threads: with the config's `eval.ladder` and without it. Prints
each run's wall time and peak RSS (VmHWM: the whole process, features included), the ratio of
the two walls, the seconds of the ladder's parts (the data-dependent prior's fit, the Monte
Carlo draws, the held-out Gibbs risks, the ascent, the posterior's optimisation) and the rungs
in loss units next to the held-out loss. Targets: n = 65536 with the ladder in at most 120 s;
n = 10^6 in at most 900 s within 2 GiB.

Usage: .venv/bin/python bench/ladder_cell.py [--n 65536 1000000] [--temperature 1]
       [--posterior-steps 0] [--config conf/scaling.yaml]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._measure import child, proc_status_kib, table  # noqa: E402

CONFIG = REPO / "conf" / "ladder.yaml"
SHOWN = (
    "test_loss",
    "cert_test_set",
    "gibbs_test_loss",
    "cert_pb_data",
    "cert_pb_data_kl",
    "cert_pb_free",
    "cert_pb_data_excess_ratio",
    "cert_pb_ref",
    "cert_pb_ref_reference",
    "cert_pb_ref_gap",
    "cert_pb_ref_excess_ratio",
)


def _timed(owner: object, name: str, seconds: dict[str, float]) -> None:
    """Replace owner.name by a wrapper that adds its seconds to seconds[name]."""
    inner: Callable = getattr(owner, name)

    def wrapper(*args: object, **kwargs: object) -> object:
        started = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - started

    setattr(owner, name, wrapper)


def measure(
    n: int, ladder: bool, temperature: float, posterior_steps: int | None, path: Path
) -> dict:
    """One cell in this process: its wall, peak RSS, the ladder's parts and the rungs."""
    import torch

    from crl.core.config import load
    from crl.kernels import pac_bayes
    from crl.steps import data
    from crl.steps import ladder as shared_rungs
    from crl.steps.features import load_features, tau_of
    from crl.steps.keys import grid_keys
    from crl.steps.unimodal import cell
    from crl.steps.unimodal import ladder as rungs

    torch.set_num_threads(2)
    config = load(path)
    section = config.eval.ladder
    if posterior_steps is not None:
        section = section.model_copy(update={"posterior_steps": posterior_steps})
    section = section if ladder else None
    config = config.model_copy(update={"eval": config.eval.model_copy(update={"ladder": section})})
    seconds: dict[str, float] = {}
    for owner, name in (
        (rungs, "fit_head"),
        (pac_bayes, "gibbs_draws"),
        (pac_bayes, "gibbs_anchor_means"),
        (rungs, "uniform_deviation_columns"),
        (shared_rungs, "optimise_posterior"),
    ):
        _timed(owner, name, seconds)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        job = data.ShardJob(config.dataset, config.seed, root / "data", root / "staging")
        for spec in data.shard_plan(config.dataset, data.split_sizes(config.dataset)):
            data.write_shard(spec, job)
        features = load_features(root / "data")
    tau = tau_of(config, features.train.labels)
    key = next(
        k
        for k in grid_keys(config)
        if (k.regime, k.loss, k.m, k.seed) == ("scrl", "info_nce", 16, 0)
        and k.temperature in (None, temperature)
    )
    started = time.perf_counter()
    row = cell.run_cell(config, dataclasses.replace(key, n=n), features, tau)
    wall = time.perf_counter() - started
    return {
        "wall": wall,
        "peak_mib": proc_status_kib("VmHWM") / 1024,
        "parts": seconds,
        "row": {name: row.get(name) for name in SHOWN},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[65536])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ladder", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--temperature", type=float, default=0.1, choices=[0.1, 1.0])
    parser.add_argument("--config", type=Path, default=CONFIG, help="a config with that cell")
    parser.add_argument(
        "--posterior-steps", type=int, default=None, help="eval.ladder.posterior_steps"
    )
    args = parser.parse_args()
    steps = args.posterior_steps
    if args.child:
        cell = (args.temperature, steps, args.config)
        print(json.dumps(measure(args.n[0], bool(args.ladder), *cell)))
        return 0
    rows, details = [], []
    extra = ["--temperature", str(args.temperature), "--config", str(args.config)]
    extra += [] if steps is None else ["--posterior-steps", str(steps)]
    for n in args.n:
        runs = {
            on: child(__file__, "--n", str(n), "--ladder", str(int(on)), *extra) for on in (0, 1)
        }
        failed = [run["error"] for run in runs.values() if "error" in run]
        if failed:
            print(f"n = {n}: {failed}")
            return 1
        plain, full = runs[0], runs[1]
        rows.append(
            {
                "n": n,
                "without_s": plain["wall"],
                "with_s": full["wall"],
                "ratio": full["wall"] / plain["wall"],
                "ladder_s": full["wall"] - plain["wall"],
                "peak_mib": full["peak_mib"],
                **{f"{k}_s": v for k, v in full["parts"].items()},
            }
        )
        details.append({"n": n, **full["row"]})
    print(table(rows))
    print(table(details))
    return 0


if __name__ == "__main__":
    sys.exit(main())
