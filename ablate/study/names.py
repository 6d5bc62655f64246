"""How planned runs are named: an axis value as text and the short name of an axis.

Run names (``norm_placement=post,warmup_ratio=0.1,seed=1``) are built from these, and the report
labels its rows with the same two helpers, so a name in a table is the name in the store.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def fmt_value(value: Any) -> str:
    """How an axis value appears in a run name."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(fmt_value(v) for v in value) + "]"
    return str(value)


def short_names(keys: Iterable[str]) -> dict[str, str]:
    """``model.norm_placement`` -> ``norm_placement`` unless two axes share the last part."""
    keys = list(keys)
    last = [k.rsplit(".", 1)[1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last, strict=True)}
