"""Validation errors as a user sees them: the first error of a pydantic ValidationError as one
line naming the dotted field (without pydantic's union and validator tags), what was wrong and
the value given, raised as ConfigError."""

from __future__ import annotations

import re
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from crl.core.datasets import DATASET_KINDS
from crl.core.dense_config import IMAGE_KINDS
from crl.core.errors import ConfigError


def _field_path(loc: tuple) -> str:
    """The dotted field of an error location, without pydantic's validator and union tags."""
    parts = [str(p) for p in loc if not str(p).startswith(("function-", "tagged"))]
    return ".".join(
        p
        for i, p in enumerate(parts)
        if not (i and parts[i - 1] in ("dataset", "images") and p in DATASET_KINDS + IMAGE_KINDS)
    )


def _format_error(err: ValidationError) -> str:
    first = err.errors()[0]
    field = _field_path(first["loc"])
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    elif first["type"] == "missing":
        message = "required key is missing"
    value = first.get("input")
    named = re.match(r"^Value error, ([A-Za-z_][\w.]*): (.*)$", message)
    if not field and named:  # a cross-field rule of the whole config names its own field
        field, message, value = named.group(1), named.group(2), {}
    shown = (
        ""
        if first["type"] in ("missing", "extra_forbidden") or isinstance(value, dict)
        else f" (got {_quoted(value)})"
    )
    return f"config field {field or '<root>'}: {_quoted(message, 300, repr_=False)}{shown}"


def _quoted(value: object, limit: int = 120, repr_: bool = True) -> str:
    """At most `limit` characters of `value` on one line: an error line stays a line."""
    text = (repr(value) if repr_ else str(value)).replace("\n", " ")
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


_Model = TypeVar("_Model", bound=BaseModel)


def validated(model: type[_Model], tree: dict) -> _Model:
    """`model` validated from `tree`; a ValidationError becomes a one-line ConfigError naming
    the first failing field (its dotted path), the value and what was expected."""
    try:
        return model.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_format_error(err)) from None
