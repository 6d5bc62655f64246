"""A scale ladder: every arm of a study trained at two or more model sizes (the rungs), its
training tokens set by one stated rule, seeds paired across arms at every rung::

    ladder:
      rungs:                              # smallest first: a name and the keys it sets
        - {name: L2, set: {model.n_layers: 2}}
        - {name: L4, set: {model.n_layers: 4}}
        - {name: L8, set: {model.n_layers: 8}}
      tokens_per_param: 2                 # training tokens = 2 x non-embedding parameters
      # steps: 1000                       # or: the same steps at every rung

The rungs are one more axis of the study, named ``rung`` (:data:`RUNG`), crossed with the
variants and the grid: a run is named ``rung=L2,norm_placement=post,seed=0`` and a claim selects
a rung as any axis value (``where: {rung: L8}``). A rung's values sit above the profile's (and
its variant values) and below the grid point; a rung may not set a grid axis (the grid would
win). The rule sets ``train.max_steps`` for each run, after the rung's shape is resolved and
before the ``derived`` rules (so ``train.eval_interval: "train.max_steps // 8"`` follows it):

* ``tokens_per_param: R``: ``max_steps = max(1, round(R * N / (batch_size * seq_len)))`` with
  ``N`` the rung's non-embedding parameters (Kaplan et al. 2020's N, counted by the model itself
  on the meta device) as the study's base, profile and rung alone set it, so every arm at a
  rung trains on the same ``R * N`` tokens (to within one step), paired by seed, even where
  an arm's own count differs a little (Pre-LN's final norm);
* ``steps: S``: ``max_steps = S`` at every rung (tokens grow with nothing but the shape).

A profile's ``ladder:`` replaces the study's (a GPU window's larger rungs). Nothing else may set
``train.max_steps`` (``--set`` still wins, as over a derived value), and each rung must be
larger than the one before it (more non-embedding parameters): one-line errors naming the key.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.claims.spec import RUNG
from ablate.config import RunConfig
from ablate.errors import ConfigError, check_known
from ablate.study.layers import NAME, Layer, parse_layer

KEYS = ("rungs", "tokens_per_param", "steps")
RULES = ("tokens_per_param", "steps")
STEPS_KEY = "train.max_steps"
MIN_RUNGS = 2
"""A ladder compares sizes: two at least. A trend over it needs three
(:func:`ablate.claims.ladder.check_ladder_claims`); at two sizes an interaction claim with
``by: {rung: [...]}`` asks how an effect differs between them."""

__all__ = ["RUNG", "Ladder", "parse_ladder"]


@dataclass(frozen=True)
class Ladder:
    """The rungs (name, the values each sets) and the rule that sets each run's steps."""

    rungs: tuple[tuple[str, Layer], ...]
    rule: str
    """``tokens_per_param`` or ``steps``."""
    value: float
    where: str
    """The ladder's key path in the study (``ladder`` or ``profiles.<name>.ladder``)."""

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.rungs]

    @property
    def rule_where(self) -> str:
        return f"{self.where}.{self.rule}"

    def rule_text(self) -> str:
        """The rule in words, e.g. ``training tokens = 2 x non-embedding parameters``."""
        if self.rule == "steps":
            return f"{int(self.value)} steps at every rung"
        return f"training tokens = {self.value:g} x non-embedding parameters (whole steps)"

    def steps(self, size: RunConfig, cfg: RunConfig) -> int:
        """``train.max_steps`` of a run ``cfg`` at a rung whose size is ``size`` (the config
        that the study's base, profile and rung alone resolve to), by the rule."""
        if self.rule == "steps":
            return int(self.value)
        tokens = self.value * non_embedding_params(size.model.model_dump_json())
        return max(1, round(tokens / (cfg.data.batch_size * cfg.data.seq_len)))

    def layer(self, size: RunConfig, cfg: RunConfig) -> Layer:
        """The rule's value for one run, as a layer blamed on the rule's key."""
        layer = Layer()
        layer.add(STEPS_KEY, self.steps(size, cfg), self.rule_where)
        return layer


@functools.lru_cache(maxsize=64)
def non_embedding_params(model_json: str) -> int:
    """The model's own count of non-embedding parameters, built on the meta device (no
    memory, no data; the vocabulary only sizes the embedding, which this leaves out)."""
    import torch  # only a study with a ladder pays for it at plan time

    from ablate.config import ModelConfig
    from ablate.model import build_model

    with torch.device("meta"):
        model = build_model(ModelConfig.model_validate_json(model_json), 256)
    return int(model.param_counts()["non_embedding"])


def parse_ladder(raw: Any, where: str, source: Path) -> Ladder | None:
    """``ladder:`` (or a profile's) as a :class:`Ladder`; None when absent."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(
            "must be a mapping {rungs: [{name, set}, ...], tokens_per_param: R | steps: S}",
            key=where,
            source=source,
        )
    for k in raw:
        check_known(k, KEYS, key=f"{where}.{k}", source=source)
    rungs = _rungs(raw.get("rungs"), f"{where}.rungs", source)
    given = [r for r in RULES if r in raw]
    if len(given) != 1:
        raise ConfigError(
            "give one rule for the training tokens: tokens_per_param (tokens = R x "
            "non-embedding parameters) or steps (the same steps at every rung)",
            key=where,
            source=source,
        )
    (rule,) = given
    value = raw[rule]
    at = f"{where}.{rule}"
    if rule == "steps":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"must be a whole number >= 1, got {value!r}", key=at, source=source)
    elif (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigError(f"must be a positive number, got {value!r}", key=at, source=source)
    return Ladder(rungs, rule, float(value), where)


def _rungs(raw: Any, where: str, source: Path) -> tuple[tuple[str, Layer], ...]:
    if not isinstance(raw, list) or len(raw) < MIN_RUNGS:
        raise ConfigError(
            f"must be a list of at least {MIN_RUNGS} rungs {{name, set}}, smallest first",
            key=where,
            source=source,
        )
    out: list[tuple[str, Layer]] = []
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise ConfigError("must be a mapping {name: ..., set: {...}}", key=at, source=source)
        for k in item:
            check_known(k, ("name", "set"), key=f"{at}.{k}", source=source)
        name = item.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise ConfigError(
                "a rung needs a plain word as its name (letters, digits, _ . + -)",
                key=f"{at}.name",
                source=source,
            )
        if name in [n for n, _ in out]:
            raise ConfigError(f"duplicate rung name {name!r}", key=f"{at}.name", source=source)
        layer = parse_layer(item.get("set"), f"{at}.set", source)
        if not layer.values:
            raise ConfigError(
                "a rung sets the keys of its size (e.g. {model.n_layers: 4})",
                key=f"{at}.set",
                source=source,
            )
        out.append((name, layer))
    return tuple(out)


def check_ladder(ladder: Ladder, setters: list[tuple[str, Any]], grid: dict, source: Path) -> None:
    """The rule is the one setter of ``train.max_steps`` (``setters``: (label, keys) of every
    other part of the study that sets values), and no rung sets a grid axis."""
    for label, keys in setters:
        if STEPS_KEY in keys:
            raise ConfigError(
                f"sets {STEPS_KEY} at every rung, so it cannot also be set in {label}",
                key=ladder.rule_where,
                source=source,
            )
    for i, (_, layer) in enumerate(ladder.rungs):
        for key in layer.values:
            if key in grid:
                raise ConfigError(
                    f"{key} is a grid axis: the grid point would override the rung",
                    key=f"{ladder.where}.rungs[{i}].set.{key}",
                    source=source,
                )


def check_sizes(ladder: Ladder, runs: list, source: Path) -> None:
    """Each rung is larger than the one before it: more non-embedding parameters, for every
    arm (``runs``: the planned runs, with ``axes[RUNG]``)."""
    by_arm: dict[str, dict[str, int]] = {}
    for run in runs:
        arm = ",".join(f"{k}={v}" for k, v in run.axes.items() if k != RUNG)
        n = non_embedding_params(run.config.model.model_dump_json())
        by_arm.setdefault(arm, {})[run.axes[RUNG]] = n
    names = ladder.names
    for arm, sizes in by_arm.items():
        for i in range(1, len(names)):
            lo, hi = sizes.get(names[i - 1]), sizes.get(names[i])
            if lo is not None and hi is not None and hi <= lo:
                what = f" ({arm})" if arm else ""
                raise ConfigError(
                    f"rung {names[i]!r} has {hi:,} non-embedding parameters, not more than "
                    f"rung {names[i - 1]!r}'s {lo:,}{what}: list the rungs smallest first",
                    key=f"{ladder.where}.rungs[{i}]",
                    source=source,
                )
