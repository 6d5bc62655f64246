"""Study files: a YAML that expands into a validated list of planned runs. Pure: trains nothing.

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
         b: {optim.warmup_ratio: 0}, where: {model.norm_placement: post}}  # ablate/study/claims.py
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
    derived:                        # values computed from the resolved config of each run
      train.max_steps: "2_000_000 // (data.batch_size * data.seq_len)"
    profiles:                       # named partial configs chosen with --profile
      cpu: {train.max_steps: 800, seeds: [0]}
      gpu:
        model.d_model: 512
        train.precision: bf16-mixed
        variants: {lstm: {model.d_model: 1024}}   # per-variant values for this profile
    default_profile: cpu            # used when --profile is not given

Precedence, lowest first: defaults < base < profile < variant < the profile's value for that
variant < grid point < seed < derived < ``--set``. A derived key may not also be set by
base/profile/variant/grid (it would be silently overwritten); ``--set`` wins over a derived
value. A profile may also hold ``derived`` (replacing the top-level rule for the same key),
``seeds`` (replacing the top-level list) and ``variants`` (values for named variants at this
profile's scale).

Derived expressions are arithmetic (``+ - * / // % **``, ``min max int round abs sqrt``) over
numbers and dotted config keys of the run's resolved config; they are evaluated in order, so a
later rule can use an earlier one.

Everything is validated before a run starts: every error is a ``ConfigError`` whose ``str`` is one
line naming the file and the key path (``studies/x.yaml: grid.model.norm_placment: unknown key
(did you mean 'model.norm_placement'?)``).
"""

from __future__ import annotations

import ast
import itertools
import math
import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import TypeAdapter, ValidationError

from ablate.config import (
    _SECTIONS,
    ConfigError,
    RunConfig,
    load_yaml,
    parse_override,
    suggest,
    valid_keys,
)

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
    "derived",
    "profiles",
    "default_profile",
    "plugins",
)
VARIANT_KEYS = ("name", "set")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


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


def run_content(cfg: RunConfig) -> dict[str, Any]:
    """What the config names but does not contain, for its run id: the sha256 of each plugin's
    source and the content key of a local or ``hf:`` dataset (registered datasets are pinned
    by checksum)."""
    # imported here: the data and model packages load torch, and a study is checked before that
    from ablate.data.source import data_key
    from ablate.model.plugins import plugin_hashes

    out: dict[str, Any] = {}
    plugins = plugin_hashes(cfg.model)
    if plugins:
        out["plugins"] = plugins
    data = data_key(cfg.data.dataset)
    if data:
        out["data"] = data
    return out


def planned_run_id(cfg: RunConfig) -> str:
    """The run id of ``cfg`` with its plugin and data content keys."""
    return cfg.run_id(run_content(cfg))


@dataclass(frozen=True)
class PlannedRun:
    """One run of a study: a resolved config and how it is named."""

    name: str
    """Readable and unique in the study, e.g. ``norm_placement=post,warmup_ratio=0.1,seed=1``."""
    variant: str
    """``name`` without the seed: the runs a report averages over seeds."""
    axes: dict[str, Any]
    """Every varied key and its value here (grid keys; ``variant`` when variants are used)."""
    seed: int
    config: RunConfig
    run_id: str

    def meta(self, study: str, profile: str | None) -> dict[str, Any]:
        return {
            "name": self.name,
            "variant": self.variant,
            "axes": dict(self.axes),
            "seed": self.seed,
            "study": study,
            "profile": profile,
        }


@dataclass(frozen=True)
class Reference:
    """A published final validation loss the report tests every variant against."""

    value: float
    label: str = "reference"


def parse_reference(raw: Any, source: Path) -> Reference | None:
    """The study's optional ``reference: {value: <loss>, label: <text>}``; ``ConfigError``
    naming ``reference.<key>`` for anything else."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(
            "must be a mapping {value: <final val loss>, label: <text>}",
            key="reference",
            source=source,
        )
    for key in raw:
        if key not in ("value", "label"):
            raise ConfigError(
                f"unknown key{suggest(str(key), ['value', 'label'])}; valid: value, label",
                key=f"reference.{key}",
                source=source,
            )
    value = raw.get("value")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(
            f"must be a finite number (a final validation loss), got {value!r}",
            key="reference.value",
            source=source,
        )
    label = raw.get("label", "reference")
    if not isinstance(label, str) or not label.strip():
        raise ConfigError("must be a non-empty string", key="reference.label", source=source)
    return Reference(float(value), label.strip())


@dataclass(frozen=True)
class Study:
    name: str
    description: str
    path: Path
    profile: str | None
    profiles: tuple[str, ...]
    runs: list[PlannedRun] = field(default_factory=list)
    reference: Reference | None = None
    plugins: tuple[str, ...] = ()
    """Plugin modules/absolute paths the runs need (imported again by ``train_run``)."""
    claims: list = field(default_factory=list)
    """The study's ``claims:`` (:class:`ablate.study.claims.Claim`), checked by the report."""
    equivalence_margin: float = 0.01

    def meta(self, run: PlannedRun) -> dict[str, Any]:
        meta = run.meta(self.name, self.profile)
        if self.plugins:
            meta["plugins"] = list(self.plugins)
        return meta


# --- helpers -----------------------------------------------------------------------------------


@cache
def _adapter(key: str) -> TypeAdapter:
    section, name = key.split(".", 1)
    info = _SECTIONS[section].model_fields[name]
    return TypeAdapter(Annotated[info.annotation, info])


def _check_value(key: str, value: Any, where: str, source: Path) -> Any:
    """Type and range of one value for ``key`` (cross-field rules are checked per run)."""
    try:
        return _adapter(key).validate_python(value)
    except ValidationError as err:
        e = err.errors()[0]
        msg = e["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{msg} (got {value!r})", key=where, source=source) from None


def _check_key(key: Any, where: str, source: Path) -> str:
    if not isinstance(key, str) or "." not in key:
        raise ConfigError(
            "expected a dotted config key such as 'model.d_model'"
            + suggest(str(key), valid_keys()),
            key=where,
            source=source,
        )
    if key not in valid_keys():
        section = key.split(".", 1)[0]
        if section not in _SECTIONS:
            msg = f"unknown section '{section}'; valid: {', '.join(_SECTIONS)}"
        else:
            msg = "unknown key"
        raise ConfigError(f"{msg}{suggest(key, valid_keys())}", key=where, source=source)
    return key


def _flat(
    mapping: Any, where: str, source: Path, *, extra: Sequence[str] = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Nested sections and/or dotted keys -> ``({dotted key: value}, {extra key: value})``.

    ``{'model': {'d_model': 8}, 'optim.lr': 1e-3}`` -> ``{'model.d_model': 8, 'optim.lr': 1e-3}``.
    Keys named in ``extra`` (e.g. ``derived`` in a profile) are returned separately.
    """
    if mapping is None:
        return {}, {}
    if not isinstance(mapping, dict):
        raise ConfigError(
            f"must be a mapping of config keys, got {type(mapping).__name__}",
            key=where,
            source=source,
        )
    flat: dict[str, Any] = {}
    others: dict[str, Any] = {}
    for key, value in mapping.items():
        path = f"{where}.{key}" if where else str(key)
        if key in extra:
            others[key] = value
        elif key in _SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(
                    "a section must be a mapping of its keys", key=path, source=source
                )
            for sub, v in value.items():
                dotted = _check_key(f"{key}.{sub}", f"{path}.{sub}", source)
                flat[dotted] = v
        else:
            if isinstance(key, str) and "." not in key:
                choices = [*_SECTIONS, *extra]
                raise ConfigError(
                    f"unknown section '{key}'{suggest(key, choices)}; valid: {', '.join(choices)}",
                    key=path,
                    source=source,
                )
            flat[_check_key(key, path, source)] = value
    return flat, others


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


# --- derived values ----------------------------------------------------------------------------

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_FUNCS = {"min": min, "max": max, "int": int, "round": round, "abs": abs, "sqrt": math.sqrt}


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _names(tree: ast.AST) -> list[str]:
    """The dotted config keys an expression reads."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name):
            name = _dotted(node)
            if name and "." in name and name not in out:
                out.append(name)
    return out


def parse_expression(text: Any, where: str, source: Path) -> ast.Expression:
    """Parse and check a derived-value expression (numbers, config keys, arithmetic)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        text = repr(text)
    if not isinstance(text, str):
        raise ConfigError("must be an arithmetic expression (a string)", key=where, source=source)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise ConfigError(f"invalid expression ({err.msg})", key=where, source=source) from None

    def check(node: ast.AST) -> None:
        if isinstance(node, ast.Expression):
            return check(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return None
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            check(node.left)
            return check(node.right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return check(node.operand)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id not in _FUNCS or node.keywords:
                raise ConfigError(
                    f"unknown function '{node.func.id}' (allowed: {', '.join(_FUNCS)})",
                    key=where,
                    source=source,
                )
            for a in node.args:
                check(a)
            return None
        name = _dotted(node)
        if name is not None:
            if name not in valid_keys():
                raise ConfigError(
                    f"unknown key '{name}'{suggest(name, valid_keys())}", key=where, source=source
                )
            return None
        raise ConfigError(
            f"unsupported expression '{ast.unparse(node)}': use numbers, config keys, "
            f"+ - * / // % ** and {', '.join(_FUNCS)}",
            key=where,
            source=source,
        )

    check(tree)
    return tree


MAX_EXPONENT = 1024
MAX_INT_BITS = 256
"""Derived values are sizes, steps and rates: an intermediate beyond 2**256 is a mistake, and
``9 ** 9 ** 9`` would otherwise compute for hours (a 370-million-digit integer)."""


def _bounded(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise ValueError(f"result too large (more than 2**{MAX_INT_BITS})")
    return value


def _safe_pow(base: Any, exp: Any) -> Any:
    """``base ** exp`` after checking the result stays small: ``|exp| <= MAX_EXPONENT`` and, for
    integers, ``bit_length(base) * exp <= MAX_INT_BITS`` (checked before computing)."""
    if abs(exp) > MAX_EXPONENT:
        raise ValueError(f"exponent {exp} too large (at most {MAX_EXPONENT})")
    if isinstance(base, int) and isinstance(exp, int) and exp > 0:
        if abs(base).bit_length() * exp > MAX_INT_BITS + exp:
            raise ValueError(f"{base} ** {exp} is too large (more than 2**{MAX_INT_BITS})")
    return base**exp


def eval_expression(tree: ast.Expression, values: dict[str, Any]) -> Any:
    """Evaluate a parsed derived expression; ``ValueError`` for results beyond the bounds."""

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return _bounded(node.value)
        if isinstance(node, ast.BinOp):
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow):
                return _bounded(_safe_pow(left, right))
            return _bounded(_BINOPS[type(node.op)](left, right))
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](ev(node.operand))
        if isinstance(node, ast.Call):
            return _FUNCS[node.func.id](*(ev(a) for a in node.args))
        return values[_dotted(node)]

    return ev(tree)


# --- loading -----------------------------------------------------------------------------------


@dataclass
class _Layer:
    """Values set by one part of the study, with the key path each came from."""

    values: dict[str, Any] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)

    def add(self, key: str, value: Any, where: str) -> None:
        self.values[key] = value
        self.where[key] = where


def _layer(flat: dict[str, Any], prefix: str, source: Path) -> _Layer:
    layer = _Layer()
    for key, value in flat.items():
        where = f"{prefix}.{key}" if prefix else key
        _check_value(key, value, where, source)
        layer.add(key, value, where)
    return layer


def _derived(raw: Any, where: str, source: Path) -> dict[str, tuple[ast.Expression, str]]:
    """``{key: (parsed expression, key path in the study)}``."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("must be a mapping of config key -> expression", key=where, source=source)
    out = {}
    for key, text in raw.items():
        path = f"{where}.{key}"
        _check_key(key, path, source)
        out[key] = (parse_expression(text, path, source), path)
    return out


def _grid(raw: Any, source: Path) -> dict[str, list[Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(
            "must be a mapping of config key -> list of values", key="grid", source=source
        )
    # nested sections are allowed too: {model: {norm_placement: [...]}}
    flat, _ = _flat(raw, "grid", source)
    grid: dict[str, list[Any]] = {}
    for key, values in flat.items():
        where = f"grid.{key}"
        if not isinstance(values, list):
            raise ConfigError(
                f"an axis must be a list of values, got {values!r}", key=where, source=source
            )
        if not values:
            raise ConfigError("empty axis: give at least one value", key=where, source=source)
        # validated values: a float axis written as [0, 0.1] is named and recorded as 0.0, 0.1
        values = [_check_value(key, v, f"{where}[{i}]", source) for i, v in enumerate(values)]
        seen = [fmt_value(v) for v in values]
        for i, s in enumerate(seen):
            if s in seen[:i]:
                raise ConfigError(
                    f"duplicate value {values[i]!r}", key=f"{where}[{i}]", source=source
                )
        grid[key] = values
    return grid


def _variants(raw: Any, source: Path) -> list[tuple[str, _Layer]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError("must be a list of {name, set} mappings", key="variants", source=source)
    if not raw:
        raise ConfigError(
            "empty list: give at least one variant or leave it out", key="variants", source=source
        )
    out: list[tuple[str, _Layer]] = []
    for i, item in enumerate(raw):
        where = f"variants[{i}]"
        if not isinstance(item, dict):
            raise ConfigError("must be a mapping {name: ..., set: {...}}", key=where, source=source)
        for k in item:
            if k not in VARIANT_KEYS:
                raise ConfigError(
                    f"unknown key{suggest(str(k), list(VARIANT_KEYS))}; valid: name, set",
                    key=f"{where}.{k}",
                    source=source,
                )
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(
                "a variant needs a non-empty string name", key=f"{where}.name", source=source
            )
        if "," in name or "=" in name:
            raise ConfigError(
                f"variant name {name!r} may not contain ',' or '='",
                key=f"{where}.name",
                source=source,
            )
        if name in [n for n, _ in out]:
            raise ConfigError(
                f"duplicate variant name {name!r}", key=f"{where}.name", source=source
            )
        flat, _ = _flat(item.get("set"), f"{where}.set", source)
        out.append((name, _layer(flat, f"{where}.set", source)))
    return out


def _seeds(raw: Any, source: Path, where: str = "seeds") -> list[int] | None:
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


@dataclass
class _Profile:
    layer: _Layer
    derived: dict[str, tuple[ast.Expression, str]] = field(default_factory=dict)
    seeds: list[int] | None = None
    seeds_where: str = ""
    variants: dict[str, _Layer] = field(default_factory=dict)
    """Per-variant values for this profile (e.g. the LSTM's width at GPU scale)."""


def _profiles(raw: Any, source: Path, variant_names: list[str]) -> dict[str, _Profile]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(
            "must be a mapping of profile name -> partial config", key="profiles", source=source
        )
    out = {}
    for name, body in raw.items():
        where = f"profiles.{name}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError("a profile name must be a plain word", key=where, source=source)
        flat, extra = _flat(body, where, source, extra=("derived", "seeds", "variants"))
        per_variant = extra.get("variants") or {}
        if not isinstance(per_variant, dict):
            raise ConfigError(
                "must be a mapping of variant name -> partial config",
                key=f"{where}.variants",
                source=source,
            )
        layers = {}
        for vname, vbody in per_variant.items():
            vwhere = f"{where}.variants.{vname}"
            if vname not in variant_names:
                raise ConfigError(
                    f"no variant named {vname!r}{suggest(str(vname), variant_names)}; "
                    f"variants: {', '.join(variant_names) or 'none defined'}",
                    key=vwhere,
                    source=source,
                )
            layers[vname] = _layer(_flat(vbody, vwhere, source)[0], vwhere, source)
        out[name] = _Profile(
            _layer(flat, where, source),
            _derived(extra.get("derived"), f"{where}.derived", source),
            _seeds(extra.get("seeds"), source, f"{where}.seeds"),
            f"{where}.seeds",
            layers,
        )
    return out


def _overrides(overrides: Sequence[str]) -> _Layer:
    layer = _Layer()
    for text in overrides:
        key, value = parse_override(text, source="--set")
        _check_value(key, value, key, Path("--set"))
        layer.add(key, value, f"--set {key}")
    return layer


def load_study(
    path: str | Path,
    profile: str | None = None,
    overrides: Sequence[str] = (),
    *,
    check_data: bool = True,
    check_device: bool = True,
    plugins: Sequence[str] = (),
    extra_seeds: dict[str, Sequence[int]] | None = None,
) -> Study:
    """Read, validate and expand a study file into its planned runs.

    Raises ``ConfigError`` (one line: file and key path) for anything wrong; nothing is
    written. ``check_data`` checks that each run's dataset is registered or an existing file,
    and that each data file is non-empty UTF-8 long enough for its runs; ``check_device`` that
    a run asking for a GPU has one (see :mod:`ablate.study.preflight`).
    The study's ``plugins:`` (paths relative to the study file) and ``plugins`` (``--plugin``
    options, paths relative to the working directory) are imported before validation.
    ``extra_seeds`` maps a variant label to seeds run in addition to the study's (added by
    ``ablate run --until-decided``, :mod:`ablate.execution.decide`).
    """
    source = Path(path)
    raw = load_yaml(source)
    if raw is None:
        raise ConfigError("empty study file", source=source)
    if not isinstance(raw, dict):
        raise ConfigError("a study must be a mapping of top-level keys", source=source)
    for key in raw:
        if key not in TOP_LEVEL:
            raise ConfigError(
                f"unknown top-level key{suggest(str(key), list(TOP_LEVEL))}; "
                f"valid: {', '.join(TOP_LEVEL)}",
                key=str(key),
                source=source,
            )

    study_plugins = raw.get("plugins") or []
    all_plugins: tuple[str, ...] = ()
    if plugins or study_plugins:  # the model package loads torch: only when there are plugins
        from ablate.model.plugins import load_plugins, plugin_paths

        load_plugins(list(plugins), key="--plugin")
        load_plugins(study_plugins, base=source.parent, source=source)
        all_plugins = tuple(
            plugin_paths(list(plugins)) + plugin_paths(list(study_plugins), source.parent)
        )

    name = raw.get("name", source.stem)
    if not isinstance(name, str) or not _NAME.match(name):
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

    base_flat, _ = _flat(raw.get("base"), "base", source)
    base = _layer(base_flat, "base", source)
    grid = _grid(raw.get("grid"), source)
    variants = _variants(raw.get("variants"), source)
    seeds = _seeds(raw.get("seeds"), source)
    derived = _derived(raw.get("derived"), "derived", source)
    profiles = _profiles(raw.get("profiles"), source, [n for n, _ in variants])

    default_profile = raw.get("default_profile")
    if default_profile is not None and default_profile not in profiles:
        raise ConfigError(
            f"unknown profile {default_profile!r}; valid: {', '.join(profiles) or 'none defined'}",
            key="default_profile",
            source=source,
        )
    if profile is None:
        profile = default_profile
    if profile is not None and profile not in profiles:
        valid = ", ".join(profiles) if profiles else "the study defines none"
        raise ConfigError(
            f"unknown profile {profile!r}{suggest(profile, list(profiles))}; valid: {valid}",
            key="--profile",
            source=source,
        )
    prof = profiles[profile] if profile else _Profile(_Layer())
    prof_layer = prof.layer
    derived = {**derived, **prof.derived}
    seeds_where = "seeds"
    if prof.seeds is not None:  # a profile may run fewer (cpu) or more (gpu) seeds
        seeds, seeds_where = prof.seeds, prof.seeds_where
    overrides_layer = _overrides(overrides)

    if seeds is not None and "train.seed" in grid:
        raise ConfigError(
            "vary the seed with the top-level 'seeds' list, not a grid axis",
            key="grid.train.seed",
            source=source,
        )
    for key, (_, where) in derived.items():
        for label, keys in (
            ("grid", grid),
            ("base", base.values),
            (f"profiles.{profile}", prof_layer.values),
            *((f"variants[{i}].set", v.values) for i, (_, v) in enumerate(variants)),
            *((f"profiles.{profile}.variants.{n}", v.values) for n, v in prof.variants.items()),
        ):
            if key in keys:
                raise ConfigError(
                    f"is derived, so it cannot also be set in {label}",
                    key=where,
                    source=source,
                )

    short = short_names(grid)
    points = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    runs: list[PlannedRun] = []
    checked: set[str] = set()
    resolved: list = []  # (config, key -> where the study set it) for the plan-time checks
    by_name: dict[str, PlannedRun] = {}
    by_id: dict[str, PlannedRun] = {}
    for vname, vlayer in variants or [(None, _Layer())]:
        for point in points:
            parts = [vname] if vname is not None else []
            parts += [f"{short[k]}={fmt_value(v)}" for k, v in point.items()]
            extra = list((extra_seeds or {}).get(",".join(parts) or "base", []))
            for seed in [*(seeds if seeds is not None else [None]), *extra]:
                layers = [base, prof_layer, vlayer, prof.variants.get(vname, _Layer())]
                grid_layer = _Layer()
                for key, value in point.items():
                    grid_layer.add(key, value, f"grid.{key}")
                layers.append(grid_layer)
                if seed is not None:
                    seed_layer = _Layer()
                    seed_where = (
                        f"{seeds_where}[{seeds.index(seed)}]"
                        if seeds is not None and seed in seeds
                        else "--until-decided"
                    )
                    seed_layer.add("train.seed", seed, seed_where)
                    layers.append(seed_layer)
                label = ",".join(parts) or "base"
                cfg, where = _resolve(layers, derived, overrides_layer, source, label)
                resolved.append((cfg, lambda k, w=where: w.get(k, k)))
                if check_data:
                    _check_dataset(cfg.data.dataset, where.get("data.dataset"), source, checked)
                seed_value = cfg.train.seed
                run_name = f"{label},seed={seed_value}" if parts else f"seed={seed_value}"
                axes = ({"variant": vname} if vname is not None else {}) | dict(point)
                run = PlannedRun(
                    name=run_name,
                    variant=label,
                    axes=axes,
                    seed=seed_value,
                    config=cfg,
                    run_id=planned_run_id(cfg),
                )
                if run.name in by_name:
                    raise ConfigError(f"duplicate run name {run.name!r}", key="grid", source=source)
                if run.run_id in by_id:
                    other = by_id[run.run_id]
                    raise ConfigError(
                        f"runs {other.name!r} and {run.name!r} resolve to the same config "
                        f"(run id {run.run_id})",
                        key="variants" if variants else "grid",
                        source=source,
                    )
                by_name[run.name] = by_id[run.run_id] = run
                runs.append(run)

    from ablate.study.preflight import check_runs

    check_runs(resolved, source, data=check_data, device=check_device)
    claims, margin = _claims(raw, source, grid, [n for n, _ in variants], runs)
    return Study(
        name=name,
        description=description.strip(),
        path=source,
        profile=profile,
        profiles=tuple(profiles),
        runs=runs,
        reference=reference,
        plugins=all_plugins,
        claims=claims,
        equivalence_margin=margin,
    )


def _claims(raw: dict, source: Path, grid: dict, variant_names: list, runs: list) -> tuple:
    """(claims, equivalence margin), validated against the study's axes (ablate.study.claims)."""
    from ablate.study.claims import parse_claims, parse_margin

    axes = ({"variant": variant_names} if variant_names else {}) | dict(grid)
    lengths = {float(x) for x in runs[0].config.train.eval_lengths} if runs else None
    margin = parse_margin(raw.get("equivalence_margin"), source)
    return parse_claims(raw.get("claims"), source, axes, lengths), margin


def _resolve(
    layers: list[_Layer],
    derived: dict[str, tuple[ast.Expression, str]],
    overrides: _Layer,
    source: Path,
    label: str,
) -> tuple[RunConfig, dict[str, str]]:
    """Merge layers (later wins), apply derived rules and ``--set``, validate the whole config."""
    merged = _Layer()
    for layer in [*layers, overrides]:
        for key, value in layer.values.items():
            merged.add(key, value, layer.where[key])
    cfg = _validate(merged, source, label)
    if derived:
        values = {f"{s}.{k}": v for s, sub in cfg.to_dict().items() for k, v in sub.items()}
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
                value = _adapter(key).validate_python(value)
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


def _validate(merged: _Layer, source: Path, label: str) -> RunConfig:
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


def _blame(loc: str, msg: str, merged: _Layer) -> str:
    """The study key path most responsible for an error at ``loc`` (a key, a section or root)."""
    if loc in merged.where:
        return merged.where[loc]
    if loc in valid_keys():
        return loc  # a default value: name the key itself
    # a cross-field rule: blame a key its message mentions, set by the highest-precedence part
    # of the study; among equals, the one the message names first (its subject)
    section = loc if loc in _SECTIONS else None
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


def _check_dataset(name: str, where: str | None, source: Path, checked: set[str]) -> None:
    """A dataset is a registered name or an existing file (nothing is downloaded here)."""
    if name in checked:
        return
    if name.startswith("hf:"):  # loads from the HF cache (or the hub); errors are one line
        from ablate.data.source import load_hf

        try:
            load_hf(name)
        except ConfigError as err:
            raise ConfigError(err.message, key=where or "data.dataset", source=source) from None
        checked.add(name)
        return
    try:
        from ablate.data import DATASETS
    except ImportError:  # pragma: no cover - data package missing
        DATASETS = {}  # noqa: N806
    p = Path(name).expanduser()
    if name not in DATASETS and not p.is_file():
        why = "is not a regular file" if p.exists() else "no such file"
        registered = ", ".join(sorted(DATASETS)) or "none"
        raise ConfigError(
            f"unknown dataset {name!r}: {why}, and not a registered dataset "
            f"(registered: {registered})",
            key=where or "data.dataset",
            source=source,
        )
    checked.add(name)
