"""`--set dotted.key=value` overrides: parsed as YAML values, applied to a config tree."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from crl.core.errors import ConfigError


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {dotted}: {key} is not a section")
        node = child
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """'grid.m=[1,4]' -> ('grid.m', [1, 4]); the value is read as YAML."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected key=value")
    key, raw = text.split("=", 1)
    if not key.strip():
        raise ConfigError(f"--set {text!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        raise ConfigError(f"--set {key}: value {raw!r} is not YAML") from None
    return key.strip(), value


def with_overrides(tree: dict, overrides: list[str]) -> dict:
    """`tree` with every dotted override applied (a copy; the overrides in order)."""
    tree = copy.deepcopy(tree)
    for text in overrides:
        key, value = parse_override(text)
        _set_dotted(tree, key, value)
    return tree
