"""Leaf: the ablation axes that pick a class, each a name -> class registry.

The built-in names of each axis are declared here (``BUILTINS``), so that the config validates
names (``check_name``) without importing the model, and so without torch. Their classes are
defined by ``ablate.model`` as it is imported (``define``, which checks that it defines exactly
the declared names); plugins add names and classes (``ablate.register``); the model builds from
the tables (``lookup``). This module imports nothing but the error type and loads nothing by
name: whoever reads a class (``table``, ``lookup``) has imported ``ablate.model`` first, as
every module inside it has, and an import graph shows that dependency where it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from ablate.errors import ConfigError

AXES = ("arch", "norm_placement", "norm", "pos_encoding", "activation", "attention")
"""``arch``: a ``LanguageModel``; ``norm_placement``: a transformer block; ``norm``: a norm;
``pos_encoding``: a ``NoPositions`` subclass; ``activation``: the whole feed-forward module;
``attention``: a ``CausalSelfAttention`` subclass."""

BUILTINS: dict[str, tuple[str, ...]] = {
    "arch": ("transformer", "lstm"),
    "norm_placement": ("post", "pre"),
    "norm": ("layernorm", "rmsnorm"),
    "pos_encoding": ("sinusoidal", "learned", "rope", "alibi", "none"),
    "activation": ("relu", "gelu", "swiglu", "geglu"),
    "attention": ("plain", "qk_norm"),
}
"""Each axis's built-in names, in the order errors list them; ``ablate.model`` defines them."""

T = TypeVar("T")
_TABLES: dict[str, dict[str, type]] = {axis: {} for axis in AXES}


def _table(axis: str) -> dict[str, type]:
    if axis not in _TABLES:
        raise ConfigError(f"unknown axis {axis!r}; valid: {', '.join(AXES)}")
    return _TABLES[axis]


def names(axis: str) -> list[str]:
    """Every valid name of ``axis``: the built-ins, then the names plugins registered."""
    reg = _table(axis)
    return list(dict.fromkeys([*BUILTINS[axis], *reg]))


def table(axis: str) -> dict[str, type]:
    """The mutable name -> class registry of ``axis``, built-ins included (defined by
    ``ablate.model``, which the caller has imported)."""
    reg = _table(axis)
    if BUILTINS[axis][0] not in reg:
        raise RuntimeError(
            f"the built-in {axis} classes are not defined: import ablate.model before reading "
            "the registry"
        )
    return reg


def define(axis: str, entries: dict[str, T]) -> dict[str, T]:
    """Add the built-in ``entries`` to ``axis``'s registry and return that registry (called by
    the model modules as they are imported); they must be the names ``BUILTINS`` declares."""
    if tuple(entries) != BUILTINS.get(axis):
        raise RuntimeError(
            f"ablate.model defines {axis} {list(entries)}, but the registry declares "
            f"{list(BUILTINS.get(axis, ()))}: keep registry.BUILTINS in step with the model"
        )
    reg = _table(axis)
    reg.update(entries)
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


def _plugins_text(axis: str) -> str:
    """What the loaded plugins registered, for an unknown name on ``axis``."""
    here = [n for n in names(axis) if n not in BUILTINS[axis]]
    if here:
        return f"plugins loaded: {', '.join(here)} on this axis"
    elsewhere = [f"{a} '{n}'" for a in AXES for n in names(a) if n not in BUILTINS[a]]
    if elsewhere:
        return (
            f"the plugins loaded register no {axis}, only {', '.join(elsewhere)}: register "
            f"the class on the axis {axis!r} it replaces"
        )
    return (
        "no plugin loaded on this axis; a name from a plugin needs the study's plugins: entry "
        "or --plugin"
    )


def check_name(axis: str) -> Callable[[str], str]:
    """A pydantic after-validator: the value must be a name in ``axis``'s registry (a built-in
    or a registered plugin's; no import)."""

    def check(value: str) -> str:
        valid = names(axis)
        if value not in valid:
            raise ValueError(f"Input should be {choices_text(valid)} ({_plugins_text(axis)})")
        return value

    return check
