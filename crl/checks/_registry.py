"""The statement registry: `@statement(name, instances=...)` at each check's definition.

One decorator fills both `STATEMENTS` (name -> check) and `DEFAULT_INSTANCES` (name -> default
instance count), in the order the statement modules are imported by `crl.checks`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crl.checks import Constants
    from crl.checks._instances import Row

    Check = Callable[[int, int, Constants], list[Row]]

STATEMENTS: dict[str, Check] = {}
DEFAULT_INSTANCES: dict[str, int] = {}


def statement(name: str, instances: int) -> Callable[[Check], Check]:
    """Register the decorated `(seed, instance, constants) -> rows` as statement `name`, run on
    `instances` instances by default."""
    if name in STATEMENTS:
        raise ValueError(f"statement={name!r}: registered twice")
    if not (isinstance(instances, int) and instances >= 1):
        raise ValueError(f"instances={instances!r}: expected an integer >= 1")

    def register(check: Check) -> Check:
        STATEMENTS[name] = check
        DEFAULT_INSTANCES[name] = instances
        return check

    return register
