"""Every `--help` page ends with one example line a user can type as it is printed."""

from __future__ import annotations

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from crl.cli import app

COMMANDS = sorted(get_command(app).commands)


def _last_line(args: list[str]) -> str:
    done = CliRunner().invoke(app, args, env={"COLUMNS": "60"})
    assert done.exit_code == 0, done.output
    return [line for line in done.output.splitlines() if line.strip()][-1].strip()


def test_the_commands_are_the_documented_ones() -> None:
    expected = {"run", "check", "report", "bench", "runs", "query", "diff"}
    assert expected | {"deploy", "serve", "submit"} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_each_help_ends_with_an_example_of_its_command(command: str) -> None:
    assert _last_line([command, "--help"]).startswith(f"Example: crl {command} ")


def test_the_top_help_ends_with_the_quickstart() -> None:
    assert _last_line(["--help"]) == "Example: crl run conf/quickstart.yaml"
