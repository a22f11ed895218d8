"""`crl deploy`, `crl serve`, `crl submit`: scheduled Prefect deployments and Ray job submission."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the deployment commands to the `crl` app."""
