"""Preparing a run folder (crl.steps.run_paths): `prepare` and `prepare_checks` hold every check
that can fail before work starts (each family's own, crl.steps.families), so bad input exits
before anything is written; then they create the folder and record the config.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from crl import checks
from crl.core.config import CheckConfig, Config, check_overrides, load, load_checks
from crl.core.errors import ConfigError
from crl.core.places import resolved
from crl.steps import families, store
from crl.steps.run_paths import CheckPaths, RunFolder, RunPaths


def writable(out: str | Path) -> Path:
    """`out`, created if needed, after proving a file can be written there; for a store URI
    (crl.steps.store), its local mirror, after proving an object can be written there."""
    if store.is_uri(out):
        return store.open_store(out)
    out = Path(resolved(out))  # absolute: Ray's workers and Ray Train read it (crl.core.places)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".crl-write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ConfigError(f"--out {out}: cannot write there ({err.strerror})") from None
    return out


# runs prepared by a CLI command before it starts its flow, taken (once) by the flow in the
# same process: the config is read, validated and its folder prepared once
_HANDED_OVER: dict[tuple, tuple] = {}


def _once(key: tuple, hand_over: bool, make: Callable[[], tuple]) -> tuple:
    """`make()`, kept for the next call with `key` when `hand_over`; without it, what was
    handed over under `key` is taken instead of made again."""
    if not hand_over and key in _HANDED_OVER:
        return _HANDED_OVER.pop(key)
    made = make()
    if hand_over:
        _HANDED_OVER[key] = made
    return made


def prepare_run(
    config_path: str | Path,
    overrides: list[str],
    out: str | Path,
    base: str | Path | None = None,
    local: bool = True,
    hand_over: bool = False,
    guard: Callable[[Config], None] | None = None,
) -> tuple[Config, RunPaths]:
    """The one preparation of a run, for the CLI and the flow: read the config at `config_path`
    with `overrides` (their paths relative to `base`, crl.core.places), then `guard` (a check
    that must come before any of the config's code is imported), then `prepare`.

    `hand_over`: keep the result for the next call with the same arguments in this process
    (`crl run` prepares, so that bad input is one line before Prefect starts; the flow it starts
    then takes the prepared run instead of reading and checking it again). Without it, a
    prepared run that was handed over is taken; otherwise the run is prepared now."""

    def make() -> tuple[Config, RunPaths]:
        config = load(config_path, overrides, base=base)
        if guard is not None:
            guard(config)
        return config, prepare(config, out, local)

    key = ("run", resolved(config_path), tuple(overrides), str(out), base, local)
    return _once(key, hand_over, make)


def prepare_check_run(
    config_path: str | Path | None,
    overrides: list[str],
    instances: int | None,
    out: str | Path,
    hand_over: bool = False,
) -> tuple[CheckConfig, CheckPaths]:
    """`prepare_run` for `crl check`: its config (the defaults without a file), then
    `prepare_checks`."""
    place = None if config_path is None else resolved(config_path)

    def make() -> tuple[CheckConfig, CheckPaths]:
        config = load_checks(place, check_overrides(overrides, instances))
        return config, prepare_checks(config, out)

    return _once(("check", place, tuple(overrides), instances, str(out)), hand_over, make)


def prepare(config: Config, out: str | Path, local: bool = True) -> RunPaths:
    """Every check that can fail before work starts; then the run folder and its config.json.

    `local`: the run uses this machine's CPUs (no cluster), so runtime.cell_cpus and the
    pretrainings' workers are checked against them."""
    families.check(config)
    if config.runtime.cell_cpus > (os.cpu_count() or 1) and local:
        raise ConfigError(
            f"config field runtime.cell_cpus: {config.runtime.cell_cpus} CPUs per cell, but this "
            f"machine has {os.cpu_count()}: no cell could ever be scheduled"
        )
    for section, pretrain in config.pretrainings().items():
        if pretrain.workers > (os.cpu_count() or 1) and local:
            raise ConfigError(
                f"config field {section}.workers: {pretrain.workers} workers of 1 CPU each, but "
                f"this machine has {os.cpu_count()}: the training could never start"
            )
    out = writable(out)
    paths = RunPaths(out / config.run_id())
    store.pull(paths.root)  # a resume from the store: its finished files
    _writable_run_folder(paths)
    if not paths.root.exists():
        store.pull(out, lambda parts: parts[1:] == ("config.json",))  # other runs' records
        note = changed_inputs(config, paths.root.parent)
        if note:
            sys.stderr.write(note + "\n")
    paths.record(config)
    return paths


def changed_inputs(config: Config, out: Path) -> str | None:
    """One line when a run of the same config read other inputs (crl.core.fingerprints): the
    fields whose fingerprints differ and the new folder; None otherwise."""
    if config.inputs is None:
        return None
    mine = config.model_dump(mode="json")
    mine.pop("inputs")
    for record in sorted(out.glob(f"{config.name}-*/config.json")):
        try:
            theirs = json.loads(record.read_text())["config"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not isinstance(theirs, dict):
            continue
        before = theirs.pop("inputs", None) or {}
        if theirs != mine or before == config.inputs:
            continue
        moved = ", ".join(
            f"{field} {before.get(field, 'unrecorded')} -> {value}"
            for field, value in sorted(config.inputs.items())
            if before.get(field) != value
        )
        return (
            f"crl: inputs changed since {record.parent} ({moved}); computing a new run in "
            f"{out / config.run_id()}"
        )
    return None


def _writable_run_folder(paths: RunFolder) -> None:
    """An existing run folder (a resume) must be writable too, not only --out."""
    if paths.root.exists() and not os.access(paths.root, os.W_OK | os.X_OK):
        raise ConfigError(f"run folder {paths.root}: exists but cannot be written (permissions)")


def prepare_checks(config: CheckConfig, out: str | Path) -> CheckPaths:
    """Statement names checked against the registry; then the run folder and its config.json."""
    unknown = [s for s in config.statements or [] if s not in checks.STATEMENTS]
    if unknown:
        raise ConfigError(
            f"config field statements: unknown statements {unknown}; "
            f"known: {sorted(checks.STATEMENTS)}"
        )
    paths = CheckPaths(writable(out) / config.run_id())
    store.pull(paths.root)
    _writable_run_folder(paths)
    paths.record(config)
    return paths
