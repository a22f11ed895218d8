"""What every top-level config shares: the YAML file it is read from and the canonical hash that
names its run folder (crl.core.config's `Config`, crl.core.check_config's `CheckConfig`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from crl.core.errors import ConfigError
from crl.core.strict import Strict


def drop(tree: dict, dotted: str, when: Callable[[Any], bool] = lambda value: True) -> None:
    """Remove the key at the `dotted` path (a.b.c) of the nested `tree`, when it is there and
    `when` holds for its value."""
    *parents, key = dotted.split(".")
    node: Any = tree
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict) and key in node and when(node[key]):
        node.pop(key)


class Run(Strict):
    """A validated top-level config; its canonical hash names the run folder."""

    # optional sections and fields (dotted paths) left out of the hash when absent, so adding
    # one to the schema does not rename the folders of configs that do not use it
    _HASH_OMITS_NONE: tuple[str, ...] = ()

    def _hashed_tree(self) -> dict:
        """What the hash covers: the validated config (defaults filled in)."""
        return self.model_dump(mode="json")

    def hash(self) -> str:
        """Canonical hash: sorted-key JSON of the validated config (defaults filled in)."""
        tree = self._hashed_tree()
        for path in self._HASH_OMITS_NONE:
            drop(tree, path, lambda value: value is None)
        canonical = json.dumps(tree, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    def run_id(self) -> str:
        return f"{self.name}-{self.hash()}"


def read_yaml(path: str | Path) -> dict:
    """The YAML mapping at `path`. Raises ConfigError (one line naming the file)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path}: does not exist")
    try:
        tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {path}: not UTF-8 text (byte {err.start})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"config file {path}: not valid YAML{where}") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"config file {path}: expected a YAML mapping at the top level")
    return tree
