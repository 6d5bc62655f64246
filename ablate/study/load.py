"""``load_study``: a study file becomes a validated :class:`~ablate.study.plan.Study`, in named
steps: read the file (:mod:`~ablate.study.spec`), import its plugins, parse its parts, apply the
profile and ``--set``, expand variants x grid x seeds and resolve each run
(:mod:`~ablate.study.plan`), check the resolved runs (:mod:`~ablate.study.preflight`) and parse
the claims (:mod:`ablate.claims.spec`). Pure: trains and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ablate.claims.ladder import check_ladder_claims
from ablate.claims.spec import RUNG, Claim, parse_claims, parse_margin
from ablate.study.plan import PlannedRun, Study, apply_profile, expand
from ablate.study.preflight import check_runs, gpu_available
from ablate.study.spec import choose_profile, parse_spec, read_spec


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
    ``ablate run until-decided``, :mod:`ablate.execution.decide`).
    """
    source = Path(path)
    raw = read_spec(source)
    all_plugins = _import_plugins(raw.get("plugins") or [], plugins, source)
    spec = parse_spec(raw, source)
    profile, why = choose_profile(spec, profile, source, gpu_available)
    plan = apply_profile(spec, profile, overrides, source)
    runs, resolved = expand(plan, source, extra_seeds=extra_seeds, check_data=check_data)
    replaced = (profile, plan.profile.claims) if profile else None
    rungs = plan.ladder.names if plan.ladder is not None else []
    axes = ({RUNG: rungs} if rungs else {}) | (
        {"variant": spec.variant_names} if spec.variant_names else {}
    )
    claims, margin = _claims(raw, source, axes | dict(plan.grid), runs, replaced)
    # the checks that read data files or ask for a GPU come last: a mistake in the YAML is said
    # before them
    check_runs(resolved, source, data=check_data, device=check_device)
    return Study(
        name=spec.name,
        description=spec.description.strip(),
        path=source,
        profile=profile,
        profile_reason=why,
        profiles=tuple(spec.profiles),
        runs=runs,
        reference=plan.profile.reference if plan.profile.sets_reference else spec.reference,
        plugins=all_plugins,
        claims=claims,
        equivalence_margin=margin,
        seen_seeds=spec.seen_seeds,
        tier=plan.profile.tier,
        ladder=plan.ladder,
        figures=spec.figures,
    )


def _import_plugins(
    study_plugins: list[str], cli_plugins: Sequence[str], source: Path
) -> tuple[str, ...]:
    """Import the ``--plugin`` options and the study's ``plugins:`` (so their registered names
    validate); their paths, for the runs to import again."""
    if not (cli_plugins or study_plugins):  # the model package loads torch: only when needed
        return ()
    from ablate.model.plugins import load_plugins, plugin_paths

    load_plugins(list(cli_plugins), key="--plugin")
    load_plugins(study_plugins, base=source.parent, source=source)
    return tuple(plugin_paths(list(cli_plugins)) + plugin_paths(list(study_plugins), source.parent))


def _claims(
    raw: dict[str, Any],
    source: Path,
    axes: dict[str, list[Any]],
    runs: list[PlannedRun],
    profile: tuple[str, dict[str, dict[str, Any]]] | None = None,
) -> tuple[list[Claim], float]:
    """(claims, equivalence margin), validated against the study's ``axes`` (its rungs,
    variants and grid), with the profile's replacements (``profile``: its name and
    ``claims:``) applied (ablate.claims.spec)."""
    lengths = {float(x) for x in runs[0].config.train.eval_lengths} if runs else None
    margin = parse_margin(raw.get("equivalence_margin"), source)
    claims = parse_claims(raw.get("claims"), source, axes, lengths, profile)
    check_ladder_claims(claims, source, axes)
    return claims, margin
