"""Config values as a study sets them: a :class:`Layer` is one part of the study (its base, a
profile, a variant, a rung, a grid point) with the key path each value came from, so an error
in a resolved run names the study key that caused it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ablate.config import field_adapter, flatten
from ablate.errors import ConfigError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
"""A study, profile or rung name: it names a folder or is typed on the command line."""


@dataclass
class Layer:
    """Values set by one part of the study, with the key path each came from."""

    values: dict[str, Any] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)

    def add(self, key: str, value: Any, where: str) -> None:
        self.values[key] = value
        self.where[key] = where


def check_value(key: str, value: Any, where: str, source: Path) -> Any:
    """Type and range of one value for ``key`` (cross-field rules are checked per run)."""
    try:
        return field_adapter(key).validate_python(value)
    except ValidationError as err:
        e = err.errors()[0]
        msg = e["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{msg} (got {value!r})", key=where, source=source) from None


def parse_layer(raw: Any, prefix: str, source: Path) -> Layer:
    """A partial config at key path ``prefix`` (nested sections and/or dotted keys), checked."""
    layer = Layer()
    for key, value in flatten(raw, source, where=prefix).items():
        where = f"{prefix}.{key}" if prefix else key
        check_value(key, value, where, source)
        layer.add(key, value, where)
    return layer
