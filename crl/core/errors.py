"""Errors a user sees as one line: the CLI turns them into exit code 2 before any work starts."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config or input that cannot be run; the message is one line naming the field or file."""


class DeployError(ValueError):
    """A deployment or job submission that cannot go ahead; one line naming what is wrong."""
