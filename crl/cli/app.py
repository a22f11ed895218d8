"""The typer app of the `crl` command and its one error path (exit 2, one line)."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer

from crl.core.places import resolved


def example(command: str) -> str:
    """A --help page's last line: one command a user can type, printed as written (no markup;
    click's \\b keeps a long line from being wrapped)."""
    return f"\b\nExample: {command}"


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Generalization bounds for contrastive representation learning, at scale.",
    epilog=example("crl run conf/quickstart.yaml"),
)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `crl: error: MESSAGE` on stderr and exit with `code`."""
    typer.echo(f"crl: error: {message}", err=True)
    raise typer.Exit(code)


def local_place(run: str, out: str) -> Path:
    """Where `run` (a folder, else a run id under --out) is on this machine, as an absolute
    path; in a store (s3://...), its local mirror with the tables downloaded (crl.steps.store)."""
    from crl.steps import store

    if store.is_uri(run):
        return _local_copy(run)
    if store.is_uri(out) and not Path(run).exists():
        return _local_copy(out, run)
    here = Path(resolved(run))
    return here if here.exists() or store.is_uri(out) else Path(resolved(run, out))


def local_out(out: str) -> Path:
    """--out on this machine; in a store, its local mirror with every run's tables and cells."""
    from crl.steps import store

    return _local_copy(out, cells=True) if store.is_uri(out) else Path(resolved(out))


def _local_copy(uri: str, run: str | None = None, cells: bool = False) -> Path:
    """crl.steps.store.local_copy; a store that cannot be read is the one-line exit."""
    from crl.core.errors import ConfigError
    from crl.steps import store

    try:
        return store.local_copy(uri, run, cells)
    except ConfigError as err:
        fail(str(err))


def readable_parquet(path: Path) -> None:
    """A table a command reads must be a whole Parquet file (one line naming it otherwise)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(path)
    except (OSError, pa.ArrowException) as err:
        fail(
            f"{path}: not a readable Parquet file ({str(err).splitlines()[0]}); "
            "rerun `crl run` on the run's config to write the tables again"
        )
