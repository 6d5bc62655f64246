"""One run's config from the study's layers: merge them in precedence order, evaluate the
derived rules, validate the whole config, and blame an error on the study key that caused it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ablate.config import SECTIONS, RunConfig, field_adapter, flatten, valid_keys
from ablate.errors import ConfigError
from ablate.study.expressions import eval_expression
from ablate.study.spec import Derived, Layer


def resolve(
    layers: list[Layer],
    derived: Derived,
    overrides: Layer,
    source: Path,
    label: str,
) -> tuple[RunConfig, dict[str, str]]:
    """Merge layers (later wins), apply derived rules and ``--set``, validate the whole config."""
    merged = Layer()
    for layer in [*layers, overrides]:
        for key, value in layer.values.items():
            merged.add(key, value, layer.where[key])
    cfg = _validate(merged, source, label)
    if derived:
        values = flatten(cfg.to_dict())
        for key, (tree, where) in derived.items():
            if key in overrides.values:
                continue  # --set wins over a derived value
            try:
                value = eval_expression(tree, values)
            except (ArithmeticError, TypeError, ValueError) as err:
                raise ConfigError(
                    f"cannot evaluate for run {label!r} ({type(err).__name__}: {err})",
                    key=where,
                    source=source,
                ) from None
            try:
                value = field_adapter(key).validate_python(value)
            except ValidationError as err:
                raise ConfigError(
                    f"{err.errors()[0]['msg']} (got {value!r} for run {label!r})",
                    key=where,
                    source=source,
                ) from None
            values[key] = value
            merged.add(key, value, where)
        cfg = _validate(merged, source, label)
    return cfg, merged.where


def _validate(merged: Layer, source: Path, label: str) -> RunConfig:
    tree: dict[str, dict[str, Any]] = {}
    for key, value in merged.values.items():
        section, name = key.split(".", 1)
        tree.setdefault(section, {})[name] = value
    try:
        return RunConfig.model_validate(tree)
    except ValidationError as err:
        e = err.errors()[0]
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        where = _blame(loc, msg, merged)
        raise ConfigError(f"{msg} (run {label!r})", key=where, source=source) from None


def _blame(loc: str, msg: str, merged: Layer) -> str:
    """The study key path most responsible for an error at ``loc`` (a key, a section or root)."""
    if loc in merged.where:
        return merged.where[loc]
    if loc in valid_keys():
        return loc  # a default value: name the key itself
    # a cross-field rule: blame a key its message mentions, set by the highest-precedence part
    # of the study; among equals, the one the message names first (its subject)
    section = loc if loc in SECTIONS else None
    mentioned = []  # (where, position in the message)
    for key, where in merged.where.items():
        s, name = key.split(".", 1)
        m = re.search(rf"\b{re.escape(key)}\b", msg)
        if m is None and s == section:
            m = re.search(rf"(?<![.\w]){re.escape(name)}\b", msg)
        if m is not None:
            mentioned.append((where, m.start()))
    if mentioned:
        return max(mentioned, key=lambda wp: (_rank(wp[0]), -wp[1]))[0]
    return loc or "config"


def _rank(where: str) -> float:
    if where.startswith("derived") or ".derived." in where:
        return 5
    if where.startswith("profiles.") and ".variants." in where:
        return 2.5  # above the variant's own value, below the grid
    prefixes = ("base", "profiles", "variants", "grid", "seeds", "derived", "--set")
    for i, prefix in enumerate(prefixes):
        if where.startswith(prefix):
            return i
    return -1
