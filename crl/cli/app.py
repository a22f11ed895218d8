"""The typer app of the `crl` command and its one error path (exit 2, one line)."""

from __future__ import annotations

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
