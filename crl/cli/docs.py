"""`crl docs tables [--check]`: the column reference of docs/tables.md, rewritten from
crl/steps/columns.json (crl.steps.schema.markdown) between its `<!-- columns:begin -->` and
`<!-- columns:end -->` markers; `--check` only says whether the page is stale (exit 1).
`crl docs figure RUN`: the README's picture, docs/quickstart.png, from a quickstart run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from crl.cli.app import app, example, fail, local_place, readable_parquet

# the checkout this crl runs from: crl/cli/docs.py -> the repository root
TABLES_PAGE = Path(__file__).resolve().parents[2] / "docs" / "tables.md"
FIGURE = TABLES_PAGE.with_name("quickstart.png")

docs_app = typer.Typer(
    no_args_is_help=True,
    help="Pages of docs/ generated from crl's own tables of facts.",
    epilog=example("crl docs tables --check"),
)
app.add_typer(docs_app, name="docs")


@docs_app.command(epilog=example("crl docs tables --check"))
def tables(
    check: Annotated[
        bool, typer.Option(help="only check: exit 1 when the page is stale, change nothing")
    ] = False,
    page: Annotated[Path, typer.Option(help="the page to rewrite")] = TABLES_PAGE,
) -> None:
    """Rewrite the column reference of docs/tables.md from crl/steps/columns.json."""
    from crl.steps import schema

    if not page.is_file():
        fail(f"{page}: no such page")
    try:
        stale = schema.update_page(page, check=check)
    except ValueError as err:
        fail(f"{page}: {err}")
    if check and stale:
        typer.echo(f"crl: {page} is stale: run `crl docs tables` (make docs)", err=True)
        raise typer.Exit(1)
    typer.echo(f"crl: {page} {'rewritten' if stale else 'is up to date'}")


@docs_app.command(epilog=example("crl docs figure runs/quickstart-<hash>"))
def figure(
    run: Annotated[str, typer.Argument(help="a run folder of conf/quickstart.yaml")],
    to: Annotated[Path, typer.Option(help="the picture to write")] = FIGURE,
) -> None:
    """Redraw the README's picture (|gap| and the bounds against n) from a run's tables."""
    import tempfile

    from crl.steps import front_figure

    tables = local_place(run, "runs") / "tables"
    readable_parquet(tables / "summary.parquet")
    try:
        with tempfile.TemporaryDirectory(dir=to.parent, prefix=".crl-") as staging:
            front_figure.draw(tables, to, Path(staging))
    except ValueError as err:
        fail(str(err))
    typer.echo(f"crl: figure  {to}")
