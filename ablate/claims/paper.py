"""A claim's ``paper:``: what the paper reports for it, as data the engine reads (the report
holds the runs' interval against it, :func:`ablate.claims.verdicts.paper_text`), never part
of what the claim tests (its fingerprint), so adding it leaves a registration valid."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.errors import ConfigError, check_known


def _number(raw: Any, key: str, source: Path) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise ConfigError(f"must be a finite number, got {raw!r}", key=key, source=source)
    return float(raw)


PAPER_KEYS = ("a", "b", "unit", "effect", "setting", "optimizer", "source")
PAPER_UNITS = ("ppl", "log-ppl", "nats")
SAME_OPTIMIZERS = ("adam", "adamw")
"""Optimizers of the runs' family (every run trains with AdamW)."""


@dataclass(frozen=True)
class Paper:
    """A claim's ``paper:``: what the paper reports, as data the engine reads::

        paper: {a: 18.66, b: 19.34, unit: ppl, setting: "WikiText-103, trained at L=1024",
                source: "Press et al. 2021, Table 2"}
        paper: {optimizer: SGD, setting: "ResNet-50 on ImageNet, 90 epochs"}

    ``a``/``b`` are the paper's numbers for the two arms in ``unit`` (``ppl``: the effect is
    ln a - ln b nats; ``log-ppl`` or ``nats``: a - b), or ``effect`` gives a - b in the
    claim's metric directly. ``optimizer``: the optimizer the paper states its result for,
    when not Adam/AdamW: the claim is then a rule from another setting, and a run that does
    not show it is "not reproduced at this setting", not "contradicted"."""

    a: float | None = None
    b: float | None = None
    unit: str = "nats"
    effect_value: float | None = None
    setting: str = ""
    optimizer: str = ""
    source: str = ""

    @property
    def effect(self) -> float | None:
        """The paper's a - b in nats (None when it reports no numbers)."""
        if self.effect_value is not None:
            return self.effect_value
        if self.a is None or self.b is None:
            return None
        if self.unit == "ppl":
            return math.log(self.a) - math.log(self.b)
        return self.a - self.b

    @property
    def other_optimizer(self) -> bool:
        return bool(self.optimizer) and self.optimizer.lower() not in SAME_OPTIMIZERS


def parse_paper(raw: Any, where: str, source: Path) -> Paper | None:
    """A claim's ``paper:`` mapping, checked (:class:`Paper`)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError("must be a mapping {a, b, unit, setting, ...}", key=where, source=source)
    for k in raw:
        check_known(k, PAPER_KEYS, key=f"{where}.{k}", source=source)
    unit = raw.get("unit", "nats")
    check_known(unit, PAPER_UNITS, what=f"unit {unit!r}", key=f"{where}.unit", source=source)
    nums = {k: _number(raw[k], f"{where}.{k}", source) for k in ("a", "b", "effect") if k in raw}
    if ("a" in nums) != ("b" in nums) or ("a" in nums and "effect" in nums):
        raise ConfigError("give a and b (the paper's numbers), or effect", key=where, source=source)
    if unit == "ppl" and any(nums.get(k, 1) <= 0 for k in ("a", "b")):
        raise ConfigError("perplexities must be positive", key=f"{where}.a", source=source)
    texts = {}
    for k in ("setting", "optimizer", "source"):
        if k in raw and not isinstance(raw[k], str):
            raise ConfigError("must be text", key=f"{where}.{k}", source=source)
        texts[k] = " ".join(str(raw.get(k) or "").split())
    return Paper(nums.get("a"), nums.get("b"), unit, nums.get("effect"), **texts)
