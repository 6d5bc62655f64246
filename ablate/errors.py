"""Leaf: the one error type for bad input, shared by every stage."""

from __future__ import annotations

from pathlib import Path


class ConfigError(ValueError):
    """A bad config value. ``str()`` is one line naming the source file (if any) and key path."""

    def __init__(self, message: str, *, key: str = "", source: str | Path | None = None):
        self.key, self.source, self.message = key, source, message
        where = ": ".join(p for p in (str(source) if source else "", key) if p)
        super().__init__(f"{where}: {message}" if where else message)
