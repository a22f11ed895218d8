"""The typer app of the `crl` command and its one error path (exit 2, one line)."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Generalization bounds for contrastive representation learning, at scale.",
)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `crl: error: MESSAGE` on stderr and exit with `code`."""
    typer.echo(f"crl: error: {message}", err=True)
    raise typer.Exit(code)


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
