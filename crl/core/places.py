"""Where a path that a user typed points, decided once at the boundary of a command.

The rule (docs/usage.md, "Paths"): a local path, wherever it is typed (`--out`, the config file,
a command's run argument, a path field inside a config file or a `--set`), is relative to the
working directory of the command the user typed, and `~` is the user's home. It becomes an
absolute path before any work starts, so that no later process (a Ray worker, Ray Train, a
Prefect worker, a Ray job on a cluster) reads it against a working directory of its own. A URI
(`s3://bucket/prefix`, `file:///data`, any `scheme://`) passes through unchanged.

A run's identity does not depend on where it was started from: the config hash covers the
content fingerprint of an input file (crl.core.fingerprints), not the place it was read from.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from crl.core.overrides import parse_override

_URI = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)

# the config fields that name a local file or folder (each is fingerprinted by its content)
PATH_FIELDS = ("dataset.path", "dense.images.path")


def is_uri(place: str | Path) -> bool:
    """Whether `place` names a store (scheme://...) rather than a local path."""
    return isinstance(place, str) and bool(_URI.match(place))


def resolved(place: str | Path, base: str | Path | None = None) -> str:
    """`place` as an absolute, normalised local path (relative to `base`, itself relative to the
    working directory, which is the default); a URI as it is. Symbolic links are kept."""
    if is_uri(place):
        return str(place)
    path = os.path.expanduser(os.fspath(place))
    root = os.path.abspath(os.path.expanduser(os.fspath(base))) if base is not None else None
    return os.path.normpath(os.path.join(root or os.getcwd(), path))


def resolved_fields(tree: dict, base: str | Path | None = None) -> dict:
    """A raw config tree with every PATH_FIELDS value that is a string made absolute (other
    values are left for validation to refuse); `tree` itself is not changed."""
    out = dict(tree)
    for field in PATH_FIELDS:
        *parents, key = field.split(".")
        node = out
        for part in parents:
            child = node.get(part) if isinstance(node, dict) else None
            if not isinstance(child, dict):
                node = None
                break
            node[part] = child = dict(child)
            node = child
        if isinstance(node, dict) and isinstance(node.get(key), str) and node[key]:
            node[key] = resolved(node[key], base)
    return out


def resolved_overrides(overrides: list[str], base: str | Path | None = None) -> list[str]:
    """`--set` overrides with the relative paths they give to PATH_FIELDS made absolute (for a
    process that reads them elsewhere: a Ray job on a cluster); the others as they are."""
    out = []
    for text in overrides:
        key, value = parse_override(text)
        if key in PATH_FIELDS and isinstance(value, str) and value and not is_uri(value):
            text = f"{key}={resolved(value, base)}"
        out.append(text)
    return out
