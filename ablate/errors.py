"""Leaf: the one error type for bad input, shared by every stage, and the one way to say
"unknown name, did you mean ...".
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A bad config value. ``str()`` is one line naming the source file (if any) and key path."""

    def __init__(self, message: str, *, key: str = "", source: str | Path | None = None):
        self.key, self.source, self.message = key, source, message
        where = ": ".join(p for p in (str(source) if source else "", key) if p)
        super().__init__(f"{where}: {message}" if where else message)


def suggest(name: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or ``''`` when none is close."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def check_known(
    name: Any,
    choices: Sequence[str],
    *,
    what: str = "key",
    key: str = "",
    source: str | Path | None = None,
    none: str = "none",
) -> None:
    """``name`` must be one of ``choices``; else ``ConfigError`` at ``key``:
    ``unknown <what> (did you mean 'x'?); valid: a, b`` (``none`` when there are no choices)."""
    if name in choices:
        return
    valid = ", ".join(choices) or none
    raise ConfigError(
        f"unknown {what}{suggest(str(name), choices)}; valid: {valid}", key=key, source=source
    )
