"""The shape of a study YAML: its top-level keys, base, grid, variants, seeds, derived values,
profiles and reference, each parsed and checked into plain values with the key path it came from.
Nothing here combines the parts into runs (:mod:`ablate.study.plan` does, in its precedence order).

A study file::

    name: norm_placement            # default: the file's stem; names the store folder
    description: |                  # the question and the paper it follows
      ...
    findings: |                     # optional: what the runs showed against the paper (reports)
      ...
    reference:                      # optional: a published final validation loss to test against
      value: 1.88
      label: nanoGPT README
    equivalence_margin: 0.01        # optional: TOST margin in nats for the report (default 0.01)
    claims:                         # optional: the paper's statements, checked by the report
      - {id: post-needs-warmup, text: ..., expect: better, a: {optim.warmup_ratio: 0.1},
         b: {optim.warmup_ratio: 0}, where: {model.norm_placement: post}}  # ablate/claims/spec.py
    base:                           # partial run config (nested sections or dotted keys)
      model: {n_layers: 6}
      optim.lr: 2e-3
    grid:                           # dotted key -> list of values; the cartesian product
      model.norm_placement: [post, pre]
      optim.warmup_ratio: [0.0, 0.1]
    variants:                       # named override sets; combined as variants x grid
      - {name: transformer, set: {}}
      - {name: lstm, set: {model.arch: lstm, model.d_model: 96}}
    seeds: [0, 1, 2]                # every point is run once per seed (sets train.seed)
    seen_seeds: [3, 4]              # trained and looked at elsewhere: run confirm skips them
    derived:                        # values computed from the resolved config of each run
      train.max_steps: "2_000_000 // (data.batch_size * data.seq_len)"
    figures:                        # optional: more figures (ablate/study/figures.py)
      layer_gradients: {by: model.norm_placement, values: [post, pre], note: ...}
    ladder:                         # optional: every arm at >= 3 sizes (ablate/study/ladder.py)
      rungs: [{name: small, set: {model.n_layers: 2}}, ...]
      tokens_per_param: 4           # or steps: S; the rule sets train.max_steps
    profiles:                       # named partial configs chosen with --profile
      cpu: {train.max_steps: 800, seeds: [0]}
      gpu:
        model.d_model: 512
        train.precision: bf16-mixed
        variants: {lstm: {model.d_model: 1024}}   # per-variant values for this profile
        tier: 1                     # the GPU window it trains in (``ablate plan --flops``)
        reference: {value: 1.4697, label: ...}    # this scale's published value (or null)
        findings: |                 # this scale's commentary (and description), replacing the
          ...                       # study's in its reports
        ladder: {rungs: [...], steps: 2000}       # this scale's rungs (replaces the study's)
        claims: {equals-x: {b: {values: [1.4697], label: ..., source: ...}}}  # per claim:
                                    # this scale's literature arm (ablate/claims/spec.py)
    default_profile: auto           # used when --profile is not given: a profile's name, or
                                    # auto: the gpu profile where CUDA is visible, else cpu

Derived expressions are arithmetic (``+ - * / // % **``, ``min max int round abs sqrt``) over
numbers and dotted config keys of the run's resolved config; they are evaluated in order, so a
later rule can use an earlier one.

Everything is validated before a run starts: every error is a ``ConfigError`` whose ``str`` is one
line naming the file and the key path (``studies/x.yaml: grid.model.norm_placment: unknown key
(did you mean 'model.norm_placement'?)``).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ablate.config import check_key, flatten, load_yaml, parse_override
from ablate.errors import ConfigError, check_known, suggest
from ablate.names import fmt_value
from ablate.study.expressions import parse_expression
from ablate.study.figures import FigureOptions, parse_figures
from ablate.study.ladder import Ladder, parse_ladder
from ablate.study.layers import NAME, Layer, check_value, parse_layer

TOP_LEVEL = (
    "name",
    "description",
    "findings",
    "reference",
    "claims",
    "equivalence_margin",
    "base",
    "grid",
    "variants",
    "seeds",
    "seen_seeds",
    "derived",
    "profiles",
    "default_profile",
    "plugins",
    "ladder",
    "figures",
)
VARIANT_KEYS = ("name", "set")
PROFILE_EXTRAS = (
    "derived",
    "seeds",
    "variants",
    "tier",
    "reference",
    "claims",
    "ladder",
    "description",
    "findings",
)
AUTO_PROFILE = "auto"
"""``default_profile: auto``: the profile on ``gpu`` where CUDA is visible, else the cpu one."""
"""What a profile may hold besides config keys."""

Derived = dict[str, tuple[ast.Expression, str]]
"""``{config key: (parsed expression, key path in the study)}``."""


def read_study_yaml(path: Path) -> dict[str, Any]:
    """The study YAML as a plain dict, unvalidated (for its ``name`` and ``description``)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("file not found", source=path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"invalid YAML ({getattr(err, 'problem', err)})", source=path) from None
    if not isinstance(data, dict):
        raise ConfigError("a study YAML must be a mapping", source=path)
    return data


def read_spec(source: Path) -> dict[str, Any]:
    """The study file as a mapping of known top-level keys (values not yet checked)."""
    raw = load_yaml(source)
    if raw is None:
        raise ConfigError("empty study file", source=source)
    if not isinstance(raw, dict):
        raise ConfigError("a study must be a mapping of top-level keys", source=source)
    for key in raw:
        check_known(key, TOP_LEVEL, what="top-level key", key=str(key), source=source)
    return raw


@dataclass(frozen=True)
class Reference:
    """A published final validation loss the report tests every variant against."""

    value: float
    label: str = "reference"


def parse_reference(raw: Any, source: Path, where: str = "reference") -> Reference | None:
    """The study's optional ``reference: {value: <loss>, label: <text>}`` (or a profile's, at
    key path ``where``); ``ConfigError`` naming ``<where>.<key>`` for anything else."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(
            "must be a mapping {value: <final val loss>, label: <text>}",
            key=where,
            source=source,
        )
    for key in raw:
        check_known(key, ("value", "label"), key=f"{where}.{key}", source=source)
    value = raw.get("value")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(
            f"must be a finite number (a final validation loss), got {value!r}",
            key=f"{where}.value",
            source=source,
        )
    label = raw.get("label", "reference")
    if not isinstance(label, str) or not label.strip():
        raise ConfigError("must be a non-empty string", key=f"{where}.label", source=source)
    return Reference(float(value), label.strip())


def overrides_layer(overrides: Sequence[str]) -> Layer:
    """The ``--set key=value`` options, the highest-precedence layer."""
    layer = Layer()
    for text in overrides:
        key, value = parse_override(text, source="--set")
        check_value(key, value, key, Path("--set"))
        layer.add(key, value, f"--set {key}")
    return layer


def parse_derived(raw: Any, where: str, source: Path) -> Derived:
    """``derived:`` rules: ``{key: (parsed expression, key path in the study)}``."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("must be a mapping of config key -> expression", key=where, source=source)
    out = {}
    for key, text in raw.items():
        path = f"{where}.{key}"
        check_key(key, path, source)
        out[key] = (parse_expression(text, path, source), path)
    return out


# --- the axes: grid, variants, seeds -----------------------------------------------------------


def parse_grid(raw: Any, source: Path) -> dict[str, list[Any]]:
    """``grid:`` as ``{dotted key: [validated values]}`` (nested sections are allowed too)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(
            "must be a mapping of config key -> list of values", key="grid", source=source
        )
    grid: dict[str, list[Any]] = {}
    for key, values in flatten(raw, source, where="grid").items():
        grid[key] = _axis(key, values, f"grid.{key}", source)
    return grid


def _axis(key: str, values: Any, where: str, source: Path) -> list[Any]:
    """One grid axis: a non-empty list of distinct valid values."""
    if not isinstance(values, list):
        raise ConfigError(
            f"an axis must be a list of values, got {values!r}", key=where, source=source
        )
    if not values:
        raise ConfigError("empty axis: give at least one value", key=where, source=source)
    # validated values: a float axis written as [0, 0.1] is named and recorded as 0.0, 0.1
    values = [check_value(key, v, f"{where}[{i}]", source) for i, v in enumerate(values)]
    seen = [fmt_value(v) for v in values]
    for i, s in enumerate(seen):
        if s in seen[:i]:
            raise ConfigError(f"duplicate value {values[i]!r}", key=f"{where}[{i}]", source=source)
    return values


def parse_variants(raw: Any, source: Path) -> list[tuple[str, Layer]]:
    """``variants:`` as ``[(name, its values)]`` in file order."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError("must be a list of {name, set} mappings", key="variants", source=source)
    if not raw:
        raise ConfigError(
            "empty list: give at least one variant or leave it out", key="variants", source=source
        )
    out: list[tuple[str, Layer]] = []
    for i, item in enumerate(raw):
        where = f"variants[{i}]"
        if not isinstance(item, dict):
            raise ConfigError("must be a mapping {name: ..., set: {...}}", key=where, source=source)
        for k in item:
            check_known(k, VARIANT_KEYS, key=f"{where}.{k}", source=source)
        name = _variant_name(item.get("name"), [n for n, _ in out], f"{where}.name", source)
        out.append((name, parse_layer(item.get("set"), f"{where}.set", source)))
    return out


def _variant_name(name: Any, taken: list[str], where: str, source: Path) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ConfigError("a variant needs a non-empty string name", key=where, source=source)
    if "," in name or "=" in name:  # run names are "axis=value,..."
        raise ConfigError(
            f"variant name {name!r} may not contain ',' or '='", key=where, source=source
        )
    if name in taken:
        raise ConfigError(f"duplicate variant name {name!r}", key=where, source=source)
    return name


def parse_seeds(raw: Any, source: Path, where: str = "seeds") -> list[int] | None:
    """``seeds:`` (one integer or a list of distinct integers); None when not given."""
    if raw is None:
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise ConfigError("must be a non-empty list of integers", key=where, source=source)
    for i, s in enumerate(raw):
        if not isinstance(s, int) or isinstance(s, bool):
            raise ConfigError(
                f"a seed must be an integer, got {s!r}", key=f"{where}[{i}]", source=source
            )
        if s in raw[:i]:
            raise ConfigError(f"duplicate seed {s}", key=f"{where}[{i}]", source=source)
    return list(raw)


# --- profiles ------------------------------------------------------------------------------------


@dataclass
class Profile:
    """One named scale of the study (``--profile``): values, rules and seeds for that scale."""

    layer: Layer
    derived: Derived = field(default_factory=dict)
    seeds: list[int] | None = None
    seeds_where: str = ""
    variants: dict[str, Layer] = field(default_factory=dict)
    """Per-variant values for this profile (e.g. the LSTM's width at GPU scale)."""
    tier: int | None = None
    """The GPU window this profile's runs train in (1 first); None: not planned in tiers."""
    reference: Reference | None = None
    sets_reference: bool = False
    """``reference:`` given in the profile: it replaces the study's (``null`` removes it)."""
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Claim id -> the keys this profile replaces (its literature arm), checked by
    :func:`ablate.claims.spec.profile_claims` where the claims are parsed."""
    ladder: Ladder | None = None
    """This scale's rungs and token rule (:mod:`ablate.study.ladder`), replacing the study's."""


def parse_profiles(raw: Any, source: Path, variant_names: list[str]) -> dict[str, Profile]:
    """``profiles:`` as ``{name: Profile}``."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(
            "must be a mapping of profile name -> partial config", key="profiles", source=source
        )
    out = {}
    for name, body in raw.items():
        where = f"profiles.{name}"
        if not isinstance(name, str) or not NAME.match(name):
            raise ConfigError("a profile name must be a plain word", key=where, source=source)
        flat = flatten(body, source, where=where, extra=PROFILE_EXTRAS)
        extra = {k: flat.pop(k) for k in PROFILE_EXTRAS if k in flat}
        variants = _profile_variants(extra.get("variants"), where, source, variant_names)
        out[name] = Profile(
            layer=parse_layer(flat, where, source),
            derived=parse_derived(extra.get("derived"), f"{where}.derived", source),
            seeds=parse_seeds(extra.get("seeds"), source, f"{where}.seeds"),
            seeds_where=f"{where}.seeds",
            variants=variants,
            tier=parse_tier(extra.get("tier"), f"{where}.tier", source),
            reference=parse_reference(extra.get("reference"), source, f"{where}.reference"),
            sets_reference="reference" in extra,
            claims=_claim_overrides(extra.get("claims"), f"{where}.claims", source),
            ladder=parse_ladder(extra.get("ladder"), f"{where}.ladder", source),
        )
        check_texts(extra, where, source)
    return out


def check_texts(extra: dict[str, Any], where: str, source: Path) -> None:
    """A profile's own ``description`` and ``findings`` must be strings: its reports show them
    instead of the study's (``ablate.results.read.scale_texts``), nothing else reads them."""
    for key in ("description", "findings"):
        if key in extra and not isinstance(extra[key], str):
            raise ConfigError("must be a string", key=f"{where}.{key}", source=source)


def parse_tier(raw: Any, where: str, source: Path) -> int | None:
    """A profile's ``tier``: the GPU window its runs train in, a whole number >= 1."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise ConfigError(
            f"must be a whole number >= 1 (the GPU window it trains in), got {raw!r}",
            key=where,
            source=source,
        )
    return raw


def _claim_overrides(raw: Any, where: str, source: Path) -> dict[str, dict[str, Any]]:
    """A profile's ``claims:`` as ``{claim id: {key: value}}`` (the keys and values are checked
    against the study's claims when those are parsed)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise ConfigError(
            "must be a mapping of claim id -> the keys this profile replaces (e.g. b: {...})",
            key=where,
            source=source,
        )
    return {str(k): dict(v) for k, v in raw.items()}


def _profile_variants(
    raw: Any, where: str, source: Path, variant_names: list[str]
) -> dict[str, Layer]:
    """A profile's ``variants:``: ``{variant name: values at this profile's scale}``."""
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ConfigError(
            "must be a mapping of variant name -> partial config",
            key=f"{where}.variants",
            source=source,
        )
    layers = {}
    for vname, vbody in raw.items():
        vwhere = f"{where}.variants.{vname}"
        if vname not in variant_names:
            raise ConfigError(
                f"no variant named {vname!r}{suggest(str(vname), variant_names)}; "
                f"variants: {', '.join(variant_names) or 'none defined'}",
                key=vwhere,
                source=source,
            )
        layers[vname] = parse_layer(vbody, vwhere, source)
    return layers


# --- the whole file ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StudySpec:
    """A study file, parsed and checked part by part, before any run is resolved."""

    name: str
    description: str
    reference: Reference | None
    base: Layer
    grid: dict[str, list[Any]]
    variants: list[tuple[str, Layer]]
    seeds: list[int] | None
    derived: Derived
    profiles: dict[str, Profile]
    default_profile: str | None
    seen_seeds: tuple[int, ...] = ()
    """Seeds trained and looked at outside the store (an earlier store, a deleted run):
    ``run confirm`` never picks them, so a confirmation seed is one nobody has seen."""
    ladder: Ladder | None = None
    """The rungs every arm trains at and the token rule (:mod:`ablate.study.ladder`)."""
    figures: dict[str, FigureOptions] = field(default_factory=dict)
    """The figures its report draws beyond every report's (:mod:`ablate.study.figures`)."""

    @property
    def variant_names(self) -> list[str]:
        return [n for n, _ in self.variants]


def parse_spec(raw: dict[str, Any], source: Path) -> StudySpec:
    """Every part of the study file except ``claims`` and ``plugins``, in file-reading order."""
    name = raw.get("name", source.stem)
    if not isinstance(name, str) or not NAME.match(name):
        raise ConfigError(
            f"study name {name!r} must be letters, digits, '_', '-', '.' (it names a folder)",
            key="name",
            source=source,
        )
    description = raw.get("description") or ""
    if not isinstance(description, str):
        raise ConfigError("must be a string", key="description", source=source)
    if not isinstance(raw.get("findings") or "", str):
        raise ConfigError("must be a string", key="findings", source=source)
    reference = parse_reference(raw.get("reference"), source)
    base = parse_layer(raw.get("base"), "base", source)
    grid = parse_grid(raw.get("grid"), source)
    variants = parse_variants(raw.get("variants"), source)
    seeds = parse_seeds(raw.get("seeds"), source)
    derived = parse_derived(raw.get("derived"), "derived", source)
    profiles = parse_profiles(raw.get("profiles"), source, [n for n, _ in variants])
    default_profile = raw.get("default_profile")
    valid = [*profiles, AUTO_PROFILE] if profiles else []
    if default_profile is not None and default_profile not in valid:
        raise ConfigError(
            f"unknown profile {default_profile!r}; valid: {', '.join(valid) or 'none defined'}",
            key="default_profile",
            source=source,
        )
    return StudySpec(
        name=name,
        description=description,
        reference=reference,
        base=base,
        grid=grid,
        variants=variants,
        seeds=seeds,
        derived=derived,
        profiles=profiles,
        default_profile=default_profile,
        seen_seeds=tuple(parse_seeds(raw.get("seen_seeds"), source, "seen_seeds") or ()),
        ladder=parse_ladder(raw.get("ladder"), "ladder", source),
        figures=parse_figures(raw.get("figures"), source),
    )


def profile_device(spec: StudySpec, name: str) -> str:
    """``train.accelerator`` as the profile ``name`` sets it (else the base; else auto)."""
    values = spec.profiles[name].layer.values
    return values.get("train.accelerator", spec.base.values.get("train.accelerator", "auto"))


def choose_profile(
    spec: StudySpec, profile: str | None, source: Path, cuda: Callable[[], bool]
) -> tuple[str | None, str]:
    """(the profile, why it was chosen): ``--profile`` if given, else the study's
    ``default_profile``; for ``auto`` the first profile on ``gpu`` where ``cuda()`` says a
    CUDA device is visible, else the first that is not on ``gpu``."""
    if profile is None and spec.default_profile == AUTO_PROFILE:
        gpu = [n for n in spec.profiles if profile_device(spec, n) == "gpu"]
        cpu = [n for n in spec.profiles if n not in gpu]
        if gpu and cuda():
            return gpu[0], "default_profile auto: a CUDA device is visible"
        if cpu:
            why = "no CUDA device visible" if gpu else "no profile on gpu"
            return cpu[0], f"default_profile auto: {why}"
        return gpu[0], "default_profile auto: every profile is on gpu"
    why = "--profile" if profile is not None else "default_profile"
    if profile is None:
        profile = spec.default_profile
    if profile is not None:
        check_known(
            profile,
            list(spec.profiles),
            what=f"profile {profile!r}",
            key="--profile",
            source=source,
            none="the study defines none",
        )
    return profile, why
