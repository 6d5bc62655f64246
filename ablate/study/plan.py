"""Planned runs: a study at one profile expanded into variants x grid points x seeds, each a
validated ``RunConfig`` with a readable name and a content-addressed run id.

Precedence, lowest first: defaults < base < profile < variant < the profile's value for that
variant < rung < grid point < seed < the ladder's step rule < derived < ``--set``. A derived
key may not also be set by base/profile/variant/rung/grid (it would be silently overwritten);
``--set`` wins over a derived value. A ladder (:mod:`ablate.study.ladder`) crosses its rungs
with the variants and the grid. A profile's ``derived`` replaces the top-level rule for the
same key, and its ``seeds`` (and ``ladder``) replace the top-level ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.config import RunConfig
from ablate.errors import ConfigError
from ablate.names import fmt_value, short_names
from ablate.registry import AXES, BUILTINS
from ablate.study.figures import FigureOptions
from ablate.study.ladder import RUNG, Ladder, check_ladder, check_sizes
from ablate.study.resolve import resolve
from ablate.study.spec import Derived, Layer, Profile, Reference, StudySpec, overrides_layer


def run_content(cfg: RunConfig) -> dict[str, Any]:
    """What the config names but does not contain, for its run id: the sha256 of each plugin's
    source and the content key of a local or ``hf:`` dataset (registered datasets are pinned
    by checksum)."""
    from ablate.data.source import data_key

    out: dict[str, Any] = {}
    plugins = {}
    if any(getattr(cfg.model, axis) not in BUILTINS[axis] for axis in AXES):
        # only a plugin's name has a plugin's hash; the model package loads torch, which a
        # study of built-ins never needs before its runs start
        from ablate.model.plugins import plugin_hashes

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
class Study:
    name: str
    description: str
    path: Path
    profile: str | None
    profiles: tuple[str, ...]
    runs: list[PlannedRun] = field(default_factory=list)
    profile_reason: str = ""
    """Why this profile: ``--profile``, ``default_profile``, or what ``auto`` saw."""
    reference: Reference | None = None
    plugins: tuple[str, ...] = ()
    """Plugin modules/absolute paths the runs need (imported again by ``train_run``)."""
    claims: list = field(default_factory=list)
    """The study's ``claims:`` (:class:`ablate.claims.spec.Claim`), checked by the report."""
    equivalence_margin: float = 0.01
    seen_seeds: tuple[int, ...] = ()
    """Seeds looked at outside the store (``seen_seeds:``); ``run confirm`` skips them."""
    tier: int | None = None
    """The profile's ``tier``: the GPU window its runs train in (``ablate plan --flops``)."""
    ladder: Ladder | None = None
    """The rungs every arm trains at (:mod:`ablate.study.ladder`); None: no ladder."""
    figures: dict[str, FigureOptions] = field(default_factory=dict)
    """The figures its report draws beyond every report's (:mod:`ablate.study.figures`)."""

    def meta(self, run: PlannedRun) -> dict[str, Any]:
        meta = run.meta(self.name, self.profile)
        if self.plugins:
            meta["plugins"] = list(self.plugins)
        return meta


# --- the study at one profile ---------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """Everything the runs are resolved from at one profile, lowest precedence first."""

    base: Layer
    profile_name: str | None
    profile: Profile
    variants: list[tuple[str, Layer]]
    grid: dict[str, list[Any]]
    seeds: list[int] | None
    seeds_where: str
    """The key path of the seeds list in use (``seeds`` or ``profiles.<name>.seeds``)."""
    derived: Derived
    overrides: Layer
    ladder: Ladder | None = None
    """The profile's ladder, else the study's."""


def apply_profile(
    spec: StudySpec, profile: str | None, overrides: Sequence[str], source: Path
) -> Plan:
    """The study at ``profile`` (already checked; None for none) with ``--set`` on top."""
    prof = spec.profiles[profile] if profile else Profile(Layer())
    seeds, seeds_where = spec.seeds, "seeds"
    if prof.seeds is not None:  # a profile may run fewer (cpu) or more (gpu) seeds
        seeds, seeds_where = prof.seeds, prof.seeds_where
    plan = Plan(
        base=spec.base,
        profile_name=profile,
        profile=prof,
        variants=spec.variants,
        grid=spec.grid,
        seeds=seeds,
        seeds_where=seeds_where,
        derived={**spec.derived, **prof.derived},
        overrides=overrides_layer(overrides),
        ladder=prof.ladder or spec.ladder,
    )
    _check_plan(plan, source)
    return plan


def _check_plan(plan: Plan, source: Path) -> None:
    """Seeds vary only through ``seeds``; a derived key is set nowhere else (it would win)."""
    if plan.seeds is not None and "train.seed" in plan.grid:
        raise ConfigError(
            "vary the seed with the top-level 'seeds' list, not a grid axis",
            key="grid.train.seed",
            source=source,
        )
    name = plan.profile_name
    setters = [
        ("grid", plan.grid),
        ("base", plan.base.values),
        (f"profiles.{name}", plan.profile.layer.values),
        *((f"variants[{i}].set", v.values) for i, (_, v) in enumerate(plan.variants)),
        *((f"profiles.{name}.variants.{n}", v.values) for n, v in plan.profile.variants.items()),
    ]
    for key, (_, where) in plan.derived.items():
        for label, keys in setters:
            if key in keys:
                raise ConfigError(
                    f"is derived, so it cannot also be set in {label}", key=where, source=source
                )
    if plan.ladder is not None:
        rungs = [
            (f"{plan.ladder.where}.rungs[{i}].set", v.values)
            for i, (_, v) in enumerate(plan.ladder.rungs)
        ]
        check_ladder(plan.ladder, [*setters, *rungs, ("derived", plan.derived)], plan.grid, source)


# --- variants x grid x seeds -------------------------------------------------------------------


def expand(
    plan: Plan,
    source: Path,
    *,
    extra_seeds: dict[str, Sequence[int]] | None = None,
    check_data: bool = True,
) -> tuple[list[PlannedRun], list]:
    """Every run of the plan, in order: variant, then grid point, then seed.

    Returns the runs and ``(config, key -> where the study set it)`` for each, for the
    plan-time checks (:func:`ablate.study.preflight.check_runs`).
    """
    short = short_names(plan.grid)
    grid = plan.grid
    points = [dict(zip(grid, vals, strict=True)) for vals in itertools.product(*grid.values())]
    runs: list[PlannedRun] = []
    resolved: list = []
    checked: set[str] = set()
    by_name: dict[str, PlannedRun] = {}
    by_id: dict[str, PlannedRun] = {}
    rungs = plan.ladder.rungs if plan.ladder is not None else [(None, Layer())]
    for rung, rlayer in rungs:
        size = _rung_size(plan, rlayer, source, f"{RUNG}={rung}") if rung is not None else None
        for vname, vlayer in plan.variants or [(None, Layer())]:
            for point in points:
                parts = [f"{RUNG}={rung}"] if rung is not None else []
                parts += [vname] if vname is not None else []
                parts += [f"{short[k]}={fmt_value(v)}" for k, v in point.items()]
                label = ",".join(parts) or "base"
                extra = list((extra_seeds or {}).get(label, []))
                axes = ({RUNG: rung} if rung is not None else {}) | (
                    {"variant": vname} if vname is not None else {}
                )
                for seed in [*(plan.seeds if plan.seeds is not None else [None]), *extra]:
                    layers = _run_layers(plan, vname, vlayer, point, seed, rlayer)
                    cfg, where = _resolve_run(plan, layers, source, label, size)
                    resolved.append((cfg, lambda k, w=where: w.get(k, k)))
                    if check_data:
                        check_dataset(cfg.data.dataset, where.get("data.dataset"), source, checked)
                    run = _planned_run(cfg, axes, point, label, named=bool(parts))
                    varied = "variants" if plan.variants else "grid"
                    _check_unique(run, by_name, by_id, varied, source)
                    runs.append(run)
    if plan.ladder is not None:
        check_sizes(plan.ladder, runs, source)
    return runs, resolved


def _rung_size(plan: Plan, rung: Layer, source: Path, label: str) -> RunConfig:
    """The config a rung's size is counted on: the study's base, profile and rung alone."""
    layers = [plan.base, plan.profile.layer, rung]
    return resolve(layers, plan.derived, plan.overrides, source, label)[0]


def _resolve_run(
    plan: Plan, layers: list[Layer], source: Path, label: str, size: RunConfig | None
) -> tuple[RunConfig, dict[str, str]]:
    """One run's config and who set what; on a ladder, resolved once for its batch shape,
    then again with the ladder's rule setting ``train.max_steps`` (before the derived rules)
    for the rung's ``size``."""
    cfg, where = resolve(layers, plan.derived, plan.overrides, source, label)
    if plan.ladder is None or size is None:
        return cfg, where
    layers = [*layers, plan.ladder.layer(size, cfg)]
    return resolve(layers, plan.derived, plan.overrides, source, label)


def _run_layers(
    plan: Plan,
    vname: str | None,
    vlayer: Layer,
    point: dict[str, Any],
    seed: int | None,
    rung: Layer | None = None,
) -> list[Layer]:
    """The layers of one run, lowest precedence first (derived values and ``--set`` aside)."""
    layers = [plan.base, plan.profile.layer, vlayer, plan.profile.variants.get(vname, Layer())]
    layers.append(rung or Layer())
    grid_layer = Layer()
    for key, value in point.items():
        grid_layer.add(key, value, f"grid.{key}")
    layers.append(grid_layer)
    if seed is not None:
        seed_layer = Layer()
        in_list = plan.seeds is not None and seed in plan.seeds
        where = f"{plan.seeds_where}[{plan.seeds.index(seed)}]" if in_list else "run until-decided"
        seed_layer.add("train.seed", seed, where)
        layers.append(seed_layer)
    return layers


def _planned_run(
    cfg: RunConfig, axes: dict[str, Any], point: dict[str, Any], label: str, *, named: bool
) -> PlannedRun:
    """``named``: the run has a rung, variant or grid point to name it by (else just its
    seed); ``axes``: its rung and variant, when the study has them."""
    seed = cfg.train.seed
    return PlannedRun(
        name=f"{label},seed={seed}" if named else f"seed={seed}",
        variant=label,
        axes=dict(axes) | dict(point),
        seed=seed,
        config=cfg,
        run_id=planned_run_id(cfg),
    )


def _check_unique(
    run: PlannedRun,
    by_name: dict[str, PlannedRun],
    by_id: dict[str, PlannedRun],
    varied: str,
    source: Path,
) -> None:
    """Two runs of one study never share a name or a config (``varied``: the key to blame)."""
    if run.name in by_name:
        raise ConfigError(f"duplicate run name {run.name!r}", key="grid", source=source)
    if run.run_id in by_id:
        other = by_id[run.run_id]
        raise ConfigError(
            f"runs {other.name!r} and {run.name!r} resolve to the same config "
            f"(run id {run.run_id})",
            key=varied,
            source=source,
        )
    by_name[run.name] = by_id[run.run_id] = run


def check_dataset(name: str, where: str | None, source: Path, checked: set[str]) -> None:
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
