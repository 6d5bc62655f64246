"""Leaf: the ablation axes that pick a class, each a name -> class registry.

The model modules fill these tables when they are imported (``define``), plugins add to them
(``ablate.register``), the config validates names against them (``check_name``) and the model
builds from them (``lookup``). This module imports nothing but the error type, so every stage
can use it without a circle. The built-in variants are defined in ``ablate.model``, which imports
torch: it is imported by name on the first read of a registry, so that validating input and
answering ``--help`` never wait for torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TypeVar

from ablate.errors import ConfigError

AXES = ("arch", "norm_placement", "norm", "pos_encoding", "activation", "attention")
"""``arch``: a ``LanguageModel``; ``norm_placement``: a transformer block; ``norm``: a norm;
``pos_encoding``: a ``NoPositions`` subclass; ``activation``: the whole feed-forward module;
``attention``: a ``CausalSelfAttention`` subclass."""

T = TypeVar("T")
_TABLES: dict[str, dict[str, type]] = {axis: {} for axis in AXES}
_BUILTIN: dict[str, set[str]] = {axis: set() for axis in AXES}


def _table(axis: str) -> dict[str, type]:
    if axis not in _TABLES:
        raise ConfigError(f"unknown axis {axis!r}; valid: {', '.join(AXES)}")
    return _TABLES[axis]


def table(axis: str) -> dict[str, type]:
    """The mutable name -> class registry of ``axis``, built-ins included."""
    importlib.import_module("ablate.model")  # defines the built-ins (once; then a dict lookup)
    return _table(axis)


def define(axis: str, entries: dict[str, T]) -> dict[str, T]:
    """Add the built-in ``entries`` to ``axis``'s registry and return that registry (called by
    the model modules as they are imported)."""
    reg = _table(axis)
    reg.update(entries)
    _BUILTIN[axis].update(entries)
    return reg  # type: ignore[return-value]


def lookup(axis: str, name: str) -> type:
    """The class registered as ``name`` on ``axis``, or a ``ValueError`` listing the valid names."""
    reg = table(axis)
    try:
        return reg[name]
    except KeyError:
        raise ValueError(f"unknown {axis} '{name}'; choose from: {', '.join(reg)}") from None


def choices_text(names: Sequence[str]) -> str:
    """``'a', 'b' or 'c'``: how pydantic lists the values of a Literal."""
    quoted = [f"'{n}'" for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def check_name(axis: str) -> Callable[[str], str]:
    """A pydantic after-validator: the value must be a name in ``axis``'s registry."""

    def check(value: str) -> str:
        names = list(table(axis))
        if value not in names:
            plugins = [n for n in names if n not in _BUILTIN[axis]]
            loaded = f"plugins loaded: {', '.join(plugins)}" if plugins else "no plugin loaded"
            raise ValueError(
                f"Input should be {choices_text(names)} ({loaded} on this axis; a name from a "
                "plugin needs the study's plugins: entry or --plugin)"
            )
        return value

    return check
