"""How runs, axes and values are named: in a run's name, and in the report's tables and figures.

Run names (``norm_placement=post,warmup_ratio=0.1,seed=1``) are built from :func:`fmt_value`
and :func:`short_names`; the runs table read back from the store (:mod:`ablate.results`)
names its columns with :func:`axis_column`, and the report, the claims and the tables label
values with :func:`format_value`, axes with :func:`display_names` and losses with
:func:`loss_unit`. A leaf below every stage: pure, no I/O, nothing from the package.
"""

from __future__ import annotations

import math
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
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last, strict=True)}


def format_value(v: Any) -> str:
    """An axis value as a short label: ``0.001`` -> ``'0.001'``, True -> ``'true'``.

    Not :func:`fmt_value`, on purpose: that one names runs and must tell every value apart
    (``repr`` floats, ``null``); a report label is short (``1.0`` -> ``'1'``) and shows a
    missing value (None, NaN) as ``'-'``.
    """
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:g}"
    if v is None:
        return "-"
    return str(v)


ID_COLUMNS = ["run_id", "name", "variant", "seed", "status"]
"""The identifying columns of the runs table, first in every row."""
RESERVED = {*ID_COLUMNS, "study", "step", "metric", "value", "held fixed"}
"""Column names an axis may not take (it gets an ``axis.`` prefix instead)."""
LENGTH_PREFIX = "val_loss_at_"
"""``val_loss_at_<m>x``: the validation loss at ``m`` times the training length."""


def axis_column(key: str) -> str:
    """The runs-table column of an axis: its key, or ``axis.<key>`` if that is taken (e.g. the
    study's ``variant`` axis, which would clash with the variant label column)."""
    return f"axis.{key}" if key in RESERVED else key


def study_key(column: str) -> str:
    """The name a study YAML gives the axis of a runs-table column: its dotted key, or
    ``variants`` for the axis of the study's ``variants:`` list (the column ``axis.variant``;
    ``variant`` is the runs' label column, a variant's name with the other axes' values)."""
    return "variants" if column == axis_column("variant") else column


def display_names(axes: list[str]) -> dict[str, str]:
    """Axis names in tables and figures: :func:`short_names` (the last part of the dotted key
    unless two axes share it), except that a name the report already uses for a column
    (:data:`RESERVED`, e.g. ``seed``) keeps the full key, and the axis of a study's
    ``variants:`` list is ``variants``, as the study names it (:func:`study_key`)."""
    return {
        a: (study_key(a) if study_key(a) != a else a if s in RESERVED else s)
        for a, s in short_names(axes).items()
    }


def length_multiple(column: str) -> float:
    """``'val_loss_at_2x'`` -> 2.0."""
    return float(column[len(LENGTH_PREFIX) : -1])


ORDER_ATTR = "value_order"
"""``DataFrame.attrs[ORDER_ATTR]``: ``{axis: its values in display order}`` for an axis whose
labels would sort wrong (a ladder's rungs, ordered by compute); pandas carries a frame's
``attrs`` to its columns and subsets."""


def value_order(values) -> list[Any]:
    """Distinct values of an axis (a pandas Series) in display order: the order its frame's
    ``attrs`` give (:data:`ORDER_ATTR`), else numbers ascending, else sorted labels."""
    vals = list(dict.fromkeys(v for v in values.tolist()))
    hint = (getattr(values, "attrs", None) or {}).get(ORDER_ATTR, {}).get(values.name)
    if hint:
        return [v for v in hint if v in vals] + [v for v in vals if v not in hint]
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in vals if v is not None):
        return sorted(vals, key=lambda v: (v is None, v if v is not None else 0))
    return sorted(vals, key=lambda v: (v is None, format_value(v)))


def variant_order(runs) -> list[str]:
    """Variants in the order their runs appear in the runs table (a pandas DataFrame, sorted)."""
    return list(dict.fromkeys(runs["variant"].tolist()))


def loss_unit(study) -> str:
    """``nats/char``, ``nats/word`` or ``nats/token``, from the runs' tokenizer (``study``: a
    study's runs table read back from the store, :class:`ablate.results.StudyData`)."""
    tok = study.runs.get("cfg.tokenizer")
    kind = tok.dropna().iloc[0] if tok is not None and tok.notna().any() else None
    return {"char": "nats/char", "word": "nats/word"}.get(kind, "nats/token")
