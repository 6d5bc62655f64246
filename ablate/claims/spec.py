"""A study's ``claims:``: the paper's statements as machine-checkable expectations.

Parsed and validated at plan time (``ablate plan`` / ``ablate run``), checked against the runs at
report time (:mod:`ablate.claims.checks`). One claim::

    claims:
      - id: post-needs-warmup                   # unique word, names the claim in the report
        text: Post-LN needs warmup at a high LR  # the paper's statement, in words
        expect: better                           # better | worse | equivalent | diverges
        a: {optim.warmup_ratio: 0.1}             # the runs of arm a (axis -> value)
        b: {optim.warmup_ratio: 0.0}             # arm b; or {values: [..], label: ..}
        where: {model.norm_placement: post}      # other axes held fixed (optional)
        metric: final_val_loss                   # final_val_loss | best_val_loss | loss@2x
                                                 # | ffn_grad_slope@init | lr_exponent
        margin: 0.01                             # optional: this claim's equivalence margin
        margin_source: pilot seed SD (0.012)     # where the margin comes from (a paper's
                                                 # tolerance, a pilot's seed noise)

A list as a value (``a: {model.activation: [swiglu, geglu]}``) means the best of those values
(lowest mean), chosen at report time and named in the report. ``b: {artifact:
../reports/nanogpt_own.json, key: full_split_val_loss, label: nanoGPT}`` compares arm a with
per-seed numbers read from a committed file that the command which produced them wrote (a JSON
object whose ``key`` is a list of numbers; the path is relative to the study file), Welch,
unpaired; the report names the file. ``b: {values: [...], source: <where they are printed>}``
types such numbers in instead, and the report says so (and cites ``source``). One published
number (``values: [1.4697]``: a paper's single run) is a fixed value: arm a's seeds are tested
against it one-sample (t-test, TOST for ``equivalent``).

A literature arm belongs to a setting: a profile may replace a claim's ``b`` (and ``metric``,
``margin``, ``margin_source``) at its scale, e.g. nanoGPT's published GPU number at the gpu
profile (:func:`profile_claims`)::

    profiles:
      gpu:
        claims:
          equals-nanogpt: {metric: best_val_loss, b: {values: [1.4697], label: nanoGPT,
                           source: "nanoGPT README, shakespeare-char GPU config"}}
``metric: lr_exponent`` is the fitted exponent alpha in lr* ∝ batch^alpha (needs grid axes
``data.batch_size`` and ``optim.lr``); its claim is ``expect: equivalent`` to ``value:`` within
``margin`` (or ``better``/``worse`` = above/below ``value``).
``expect: above`` / ``below`` with ``value:`` and arm ``a`` only: a one-sided one-sample t-test
of the arm's per-run metric against ``value`` (``below`` with a ``margin``: below
``value + margin``). ``expect: all`` with ``all: [{a, expect: above|below, value, margin}, ...]``
(same ``metric`` and ``where``) is an intersection: it reproduces only when every part does
(intersection-union test, its p the largest part's), e.g. "Post-LN's slope > 0 and Pre-LN's <= 0".
``expect: smaller`` / ``larger`` / ``equal`` with ``by: {axis: [v1, v2]}`` is an interaction:
the effect of ``a`` vs ``b`` (one value per axis, the same axes) is smaller/larger/equal at
``v1`` than at ``v2``, tested on the per-seed difference of differences
(:mod:`ablate.claims.interaction`).
``expect: grows`` / ``shrinks`` / ``flat`` in a study with a scale ladder is a trend: the gap
``a - b`` (or an interaction's, with ``by:``) regressed per seed on log10 training FLOPs across
the rungs, its slope per decade tested (:mod:`ablate.claims.trend`); ``flat`` states its
``margin`` (nats per decade). In a ladder study every other claim compares its arms at one rung
(``where: {rung: ...}``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.claims.paper import Paper, parse_paper
from ablate.errors import ConfigError, check_known, suggest

KINDS = (
    "better",
    "worse",
    "equivalent",
    "diverges",
    "above",
    "below",
    "all",
    "smaller",
    "larger",
    "equal",
    "grows",
    "shrinks",
    "flat",
)
INTERACTION = ("smaller", "larger", "equal")
"""Interaction kinds: the effect of ``a`` vs ``b`` is smaller/larger/equal at ``by``'s first
value than at its second (:mod:`ablate.claims.interaction`)."""
ONE_SAMPLE = ("above", "below")
TREND = ("grows", "shrinks", "flat")
"""Trend kinds: the gap ``metric(a) - metric(b)`` (or an interaction's difference of
differences) rises / falls / stays within ``±margin`` per decade of training compute across a
ladder's rungs (:mod:`ablate.claims.trend`)."""
TREND_AS_PAIRED = {"grows": "worse", "shrinks": "better", "flat": "equivalent"}
"""A trend decides like a paired claim on its per-seed slopes: "grows" wants a positive slope
as "worse" wants a positive ``a - b``; "flat" is an equivalence."""
EQUIVALENCE = ("equivalent", "equal", "flat")
"""Kinds that TOST decides: an equivalence, an interaction's equal, a flat trend."""
RUNG = "rung"
"""The axis of a scale ladder's rungs (:mod:`ablate.study.ladder`)."""
KEYS = (
    "id",
    "text",
    "expect",
    "a",
    "b",
    "where",
    "metric",
    "margin",
    "margin_source",
    "value",
    "all",
    "by",
    "paper",
)
PART_KEYS = ("a", "expect", "value", "margin")
BASE_METRICS = ("final_val_loss", "best_val_loss", "ffn_grad_slope@init")
"""Per-run metrics; lower is "better". ``ffn_grad_slope@init``: slope of log10 of the FFN
output weight's gradient norm over the layer index at step 0 (Xiong et al. Fig. 3)."""
FITTED = ("lr_exponent",)
LENGTH_METRIC = re.compile(r"^loss@(\d+(?:\.\d+)?)x$")
DEFAULT_MARGIN = 0.01
ALPHA = 0.05
"""The α of every claim: its whole budget over all its attempts (:mod:`ablate.claims.budget`)."""
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    expect: str
    metric: str = "final_val_loss"
    a: dict[str, Any] = field(default_factory=dict)
    b: dict[str, Any] = field(default_factory=dict)
    where: dict[str, Any] = field(default_factory=dict)
    margin: float | None = None
    value: float | None = None
    """The fitted quantity's expected value (``lr_exponent``)."""
    external: tuple[float, ...] = ()
    """``b: {values: [...]}``: published per-seed numbers to compare arm a with."""
    external_label: str = ""
    external_source: str = ""
    """Where ``external`` came from: ``"<artifact path>: <key>"``, or empty when typed in."""
    margin_source: str = ""
    """Where the margin comes from, in words (a paper's tolerance, a pilot's seed noise)."""
    parts: tuple[Claim, ...] = ()
    """``expect: all``: the one-sample parts that must all hold (same metric and where)."""
    by: dict[str, list[Any]] = field(default_factory=dict)
    """``expect: smaller/larger/equal``: ``{axis: [v1, v2]}``, the two values of the axis at
    which the effect of ``a`` vs ``b`` is compared (an interaction)."""
    paper: Paper | None = None
    """What the paper reports for the claim, and where (:class:`Paper`): the report holds the
    runs' interval against it; not part of what the claim tests (its fingerprint)."""

    @property
    def length(self) -> float | None:
        """``loss@2x`` -> 2.0; None for other metrics."""
        m = LENGTH_METRIC.match(self.metric)
        return float(m.group(1)) if m else None


def parse_margin(raw: Any, source: Path, key: str = "equivalence_margin") -> float:
    """The study's ``equivalence_margin`` (nats, > 0; default 0.01)."""
    if raw is None:
        return DEFAULT_MARGIN
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not raw > 0:
        raise ConfigError(f"must be a positive number (nats), got {raw!r}", key=key, source=source)
    return float(raw)


def _number(raw: Any, key: str, source: Path) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise ConfigError(f"must be a finite number, got {raw!r}", key=key, source=source)
    return float(raw)


def _selector(raw: Any, where: str, source: Path, axes: dict[str, list[Any]]) -> dict[str, Any]:
    """``{axis: value | [values]}`` with every axis and value among the study's."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("must be a mapping of axis -> value", key=where, source=source)
    out: dict[str, Any] = {}
    for k, v in raw.items():
        key = str(k)
        if key not in axes:
            valid = ", ".join(axes) or "the study varies nothing"
            raise ConfigError(
                f"not an axis of this study{suggest(key, list(axes))}; axes: {valid}",
                key=f"{where}.{key}",
                source=source,
            )
        for i, x in enumerate(v if isinstance(v, list) else [v]):
            if not any(x == y for y in axes[key]):
                vals = ", ".join(str(y) for y in axes[key])
                sub = f"{where}.{key}" + (f"[{i}]" if isinstance(v, list) else "")
                raise ConfigError(
                    f"{x!r} is not a value of this axis; values: {vals}", key=sub, source=source
                )
        out[key] = list(v) if isinstance(v, list) else v
    return out


EXTERNAL_KEYS = ("values", "artifact", "key", "label", "source")
PROFILE_KEYS = ("b", "metric", "margin", "margin_source")
"""What a profile may replace in a claim: its literature arm and how it is measured there."""


def _external(raw: dict, where: str, source: Path) -> tuple[tuple[float, ...], str, str]:
    """(values, label, source) of a published arm: typed ``values``, or ``artifact`` + ``key``."""
    for k in raw:
        check_known(k, EXTERNAL_KEYS, key=f"{where}.{k}", source=source)
    if ("values" in raw) == ("artifact" in raw):
        raise ConfigError("give either values or artifact (with key)", key=where, source=source)
    label = str(raw.get("label") or "published values")
    cited = raw.get("source")
    if cited is not None and ("values" not in raw or not isinstance(cited, str) or not cited):
        why = "names where typed values are printed" if "values" not in raw else "must be text"
        raise ConfigError(why, key=f"{where}.source", source=source)
    if "values" in raw:
        typed = f"typed in from {' '.join(cited.split())}" if cited else ""
        return _numbers(raw["values"], f"{where}.values", source), label, typed
    path, key = raw["artifact"], raw.get("key")
    if not isinstance(key, str):
        raise ConfigError(
            "must name the artifact's list of values", key=f"{where}.key", source=source
        )
    file = source.parent / str(path)
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as err:
        why = "not found" if isinstance(err, FileNotFoundError) else f"not JSON ({err})"
        raise ConfigError(f"{file}: {why}", key=f"{where}.artifact", source=source) from None
    if not isinstance(data, dict) or key not in data:
        keys = ", ".join(k for k, v in data.items() if isinstance(v, list)) if data else ""
        raise ConfigError(
            f"{file} has no {key!r}; lists in it: {keys or 'none'}",
            key=f"{where}.key",
            source=source,
        )
    return _numbers(data[key], f"{where}.key", source), label, f"{path}: {key}"


def _numbers(vals: Any, where: str, source: Path) -> tuple[float, ...]:
    if not isinstance(vals, list) or not vals:
        raise ConfigError(
            "must be a list of numbers (published per-seed values, or one published value)",
            key=where,
            source=source,
        )
    return tuple(_number(v, f"{where}[{i}]", source) for i, v in enumerate(vals))


def _metric(raw: Any, where: str, source: Path, axes: dict[str, list[Any]]) -> str:
    metric = "final_val_loss" if raw is None else raw
    valid = [*BASE_METRICS, "loss@<N>x", *FITTED]
    if not isinstance(metric, str) or not (
        metric in BASE_METRICS or metric in FITTED or LENGTH_METRIC.match(metric)
    ):
        raise ConfigError(
            f"unknown metric {metric!r}; valid: {', '.join(valid)}", key=where, source=source
        )
    if metric == "lr_exponent" and not {"data.batch_size", "optim.lr"} <= set(axes):
        raise ConfigError(
            "lr_exponent needs grid axes data.batch_size and optim.lr", key=where, source=source
        )
    return metric


def parse_claim(
    raw: Any, i: int, source: Path, axes: dict[str, list[Any]], lengths: set[float] | None = None
) -> Claim:
    """Claim ``i`` of the study's list, checked against its ``axes`` and evaluation ``lengths``."""
    where = f"claims[{i}]"
    if not isinstance(raw, dict):
        raise ConfigError(
            "must be a mapping {id, text, expect, a, b, ...}", key=where, source=source
        )
    for k in raw:
        check_known(k, KEYS, key=f"{where}.{k}", source=source)
    cid, text, expect = _statement(raw, where, source)
    metric = _metric(raw.get("metric"), f"{where}.metric", source, axes)
    _check_length(metric, lengths, f"{where}.metric", source)
    margin = raw.get("margin")
    margin = None if margin is None else parse_margin(margin, source, f"{where}.margin")
    external, label, ext_source = (), "", ""
    b_raw = raw.get("b")
    if isinstance(b_raw, dict) and ("values" in b_raw or "artifact" in b_raw):
        external, label, ext_source = _external(b_raw, f"{where}.b", source)
        b = {}
    else:
        b = _selector(b_raw, f"{where}.b", source, axes)
    value = _value(raw.get("value"), metric, expect, where, source)
    needs_b = metric not in FITTED and expect not in ("diverges", *ONE_SAMPLE, "all")
    if needs_b and not b and not external:
        raise ConfigError("needs b: (the arm to compare a with)", key=f"{where}.b", source=source)
    source_text = raw.get("margin_source")
    if source_text is not None and not isinstance(source_text, str):
        raise ConfigError("must be text", key=f"{where}.margin_source", source=source)
    parts = _parts(raw.get("all"), expect, metric, where, source, axes)
    by = _by(raw, expect, metric, where, source, axes)
    return Claim(
        id=cid,
        text=" ".join(text.split()),
        expect=expect,
        metric=metric,
        a=_selector(raw.get("a"), f"{where}.a", source, axes),
        b=b,
        where=_selector(raw.get("where"), f"{where}.where", source, axes),
        margin=margin,
        value=value,
        external=external,
        external_label=label,
        external_source=ext_source,
        margin_source=" ".join((source_text or "").split()),
        parts=parts,
        by=by,
        paper=parse_paper(raw.get("paper"), f"{where}.paper", source),
    )


def _by(
    raw: dict, expect: str, metric: str, where: str, source: Path, axes: dict[str, list[Any]]
) -> dict[str, list[Any]]:
    """An interaction's ``by: {axis: [v1, v2]}``, checked with its arms: ``a`` and ``b`` one
    value each on the same axes, ``by`` another axis with two of its values, none in ``where``."""
    at = f"{where}.by"
    if ("by" in raw) != (expect in INTERACTION) and expect not in TREND:
        kinds = "/".join(INTERACTION)
        raise ConfigError(f"expect: {kinds} and by: go together", key=at, source=source)
    if "by" not in raw:
        return {}
    if metric in FITTED or raw.get("value") is not None:
        raise ConfigError(
            "an interaction compares per-run metrics, not a fitted value", key=at, source=source
        )
    by = raw["by"]
    if not isinstance(by, dict) or len(by) != 1:
        raise ConfigError(
            "must name one axis and its two values, e.g. {model.norm_placement: [pre, post]}",
            key=at,
            source=source,
        )
    ((axis, vals),) = by.items()
    if not isinstance(vals, list) or len(vals) != 2 or vals[0] == vals[1]:
        raise ConfigError(
            "must list two different values of the axis: [where the effect is "
            f"{expect}, where it is compared]",
            key=f"{at}.{axis}",
            source=source,
        )
    sel = _selector(by, at, source, axes)
    a, b = raw.get("a"), raw.get("b")
    for name, arm in (("a", a), ("b", b)):
        if not isinstance(arm, dict) or not arm:
            raise ConfigError(
                "an interaction needs arms a and b (the effect is a vs b)",
                key=f"{where}.{name}",
                source=source,
            )
        for k, v in arm.items():
            if isinstance(v, list):
                raise ConfigError(
                    "one value per axis in an interaction (no best-of lists)",
                    key=f"{where}.{name}.{k}",
                    source=source,
                )
    if set(map(str, a)) != set(map(str, b)):
        raise ConfigError("a and b must set the same axes", key=f"{where}.b", source=source)
    clash = [str(k) for k in (*a, *(raw.get("where") or {})) if str(k) == str(axis)]
    if clash:
        raise ConfigError(
            f"{axis} is the by axis; it cannot also be in a, b or where", key=at, source=source
        )
    return {str(axis): list(sel[str(axis)])}


def _parts(
    raw: Any, expect: str, metric: str, where: str, source: Path, axes: dict[str, list[Any]]
) -> tuple[Claim, ...]:
    """``expect: all``'s parts: one-sample claims (``above``/``below`` a value) on arm ``a``."""
    if (raw is not None) != (expect == "all"):
        raise ConfigError(
            "expect: all and all: [...] go together", key=f"{where}.all", source=source
        )
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) < 2:
        raise ConfigError("must be a list of at least 2 parts", key=f"{where}.all", source=source)
    out = []
    for j, part in enumerate(raw):
        at = f"{where}.all[{j}]"
        if not isinstance(part, dict):
            raise ConfigError("must be a mapping {a, expect, value}", key=at, source=source)
        for k in part:
            check_known(k, PART_KEYS, key=f"{at}.{k}", source=source)
        check_known(part.get("expect"), ONE_SAMPLE, what="kind", key=f"{at}.expect", source=source)
        margin = part.get("margin")
        out.append(
            Claim(
                id=f"part{j + 1}",
                text="",
                expect=part["expect"],
                metric=metric,
                a=_selector(part.get("a"), f"{at}.a", source, axes),
                margin=None if margin is None else parse_margin(margin, source, f"{at}.margin"),
                value=_number(part.get("value"), f"{at}.value", source),
            )
        )
    return tuple(out)


def _statement(raw: dict, where: str, source: Path) -> tuple[str, str, str]:
    """The claim's ``id``, ``text`` and ``expect``, checked."""
    cid = raw.get("id")
    if not isinstance(cid, str) or not _ID.match(cid):
        raise ConfigError(
            "must be a plain word (letters, digits, _ . -)", key=f"{where}.id", source=source
        )
    text = raw.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("must be a non-empty string", key=f"{where}.text", source=source)
    expect = raw.get("expect")
    check_known(expect, KINDS, what=f"kind {expect!r}", key=f"{where}.expect", source=source)
    return cid, text, expect


def _check_length(metric: str, lengths: set[float] | None, where: str, source: Path) -> None:
    """A ``loss@<N>x`` metric needs ``N`` among the runs' ``train.eval_lengths``."""
    m = LENGTH_METRIC.match(metric)
    if m and lengths is not None and float(m.group(1)) not in lengths:
        have = ", ".join(f"{x:g}" for x in sorted(lengths)) or "none"
        raise ConfigError(
            f"{metric} is not evaluated by these runs (train.eval_lengths: {have})",
            key=where,
            source=source,
        )


def _value(raw: Any, metric: str, expect: str, where: str, source: Path) -> float | None:
    """``value:``, the expected fitted quantity: required by a fitted metric, refused otherwise."""
    if metric in FITTED:
        if raw is None:
            raise ConfigError(
                f"{metric} needs value: (the expected exponent)",
                key=f"{where}.value",
                source=source,
            )
        value = _number(raw, f"{where}.value", source)
        if expect == "diverges":
            raise ConfigError(f"{metric} cannot diverge", key=f"{where}.expect", source=source)
        return value
    if expect in ONE_SAMPLE:
        return _number(raw, f"{where}.value", source)
    if raw is not None:
        raise ConfigError(
            "only a fitted metric (lr_exponent) or expect above/below takes value:",
            key=f"{where}.value",
            source=source,
        )
    return None


def profile_claims(
    raw: list, overrides: dict[str, dict[str, Any]], where: str, source: Path, axes, lengths
) -> list:
    """The study's raw claims with a profile's ``claims:`` applied: for each claim id there,
    its :data:`PROFILE_KEYS` replaced. Each replacement is checked at its own key path
    (``profiles.gpu.claims.<id>.<key>``). An id the study does not have, given with its
    ``text``, is a whole claim of this profile only (a literature arm of its setting: nanoGPT's
    published GPU number is a claim of the gpu profile alone), checked as any claim."""
    ids = [c.get("id") for c in raw if isinstance(c, dict)]
    out = list(raw)
    for cid, keys in overrides.items():
        at = f"{where}.{cid}"
        if cid not in ids and "text" in keys:
            out.append(
                _profile_only_claim({"id": cid, **keys}, len(out), at, source, axes, lengths)
            )
            continue
        if cid not in ids:
            raise ConfigError(
                f"no claim with this id{suggest(cid, [str(i) for i in ids])} (a claim of this "
                f"profile only needs its text:); claims: {', '.join(map(str, ids)) or 'none'}",
                key=at,
                source=source,
            )
        for k, v in keys.items():
            check_known(k, PROFILE_KEYS, key=f"{at}.{k}", source=source)
            _check_profile_value(k, v, f"{at}.{k}", source, axes, lengths)
        i = ids.index(cid)
        out[i] = {**raw[i], **keys}
    return out


def _profile_only_claim(raw: dict, i: int, at: str, source: Path, axes, lengths) -> dict:
    """``raw``, checked as claim ``i`` would be, its errors named at the profile's key ``at``."""
    try:
        parse_claim(raw, i, source, axes, lengths)
    except ConfigError as err:
        key = str(err.key or "").replace(f"claims[{i}]", at, 1)
        raise ConfigError(err.message, key=key, source=source) from None
    return raw


def _check_profile_value(key: str, value: Any, where: str, source: Path, axes, lengths) -> None:
    """One replaced key of a claim, checked as the claim's own would be."""
    if key == "metric":
        _check_length(_metric(value, where, source, axes), lengths, where, source)
    elif key == "margin":
        parse_margin(value, source, where)
    elif key == "margin_source" and not isinstance(value, str):
        raise ConfigError("must be text", key=where, source=source)
    elif key == "b":
        if isinstance(value, dict) and ("values" in value or "artifact" in value):
            _external(value, where, source)
        else:
            _selector(value, where, source, axes)


def parse_claims(
    raw: Any,
    source: Path,
    axes: dict[str, list[Any]],
    lengths: set[float] | None = None,
    profile: tuple[str, dict[str, dict[str, Any]]] | None = None,
) -> list[Claim]:
    """The study's ``claims:`` list; ``axes`` maps each axis (``variant`` for named variants)
    to its values; ``lengths`` the evaluation length multiples the runs record (None: unknown);
    ``profile``: (its name, its ``claims:`` overrides), applied first (:func:`profile_claims`).
    ``ConfigError`` names ``claims[i].<key>`` for anything wrong."""
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise ConfigError("must be a list of claims", key="claims", source=source)
    if profile is not None and profile[1]:
        where = f"profiles.{profile[0]}.claims"
        raw = profile_claims(raw, profile[1], where, source, axes, lengths)
    claims = [parse_claim(c, i, source, axes, lengths) for i, c in enumerate(raw)]
    seen: set[str] = set()
    for i, c in enumerate(claims):
        if c.id in seen:
            raise ConfigError(f"duplicate claim id {c.id!r}", key=f"claims[{i}].id", source=source)
        seen.add(c.id)
    return claims


def claim_canonical(claim: Claim, default_margin: float | None = None) -> str:
    """The claim's canonical JSON: what it tests (``expect``, ``metric``, arms, ``where``, the
    margin in force, ``value``, published values), keys sorted, no whitespace. The ``id`` names
    the claim, ``text`` words it and a published arm's ``label`` names it: none is part of it.
    ``default_margin``: the study's ``equivalence_margin``, in force when the claim sets none
    (changing it then edits the claim)."""
    import json

    margin = claim.margin if claim.margin is not None else default_margin
    content = {
        "expect": claim.expect,
        "metric": claim.metric,
        "a": claim.a,
        "b": claim.b,
        "where": claim.where,
        "margin": margin,
        "value": claim.value,
        "external": list(claim.external),
    }
    if claim.parts:
        content["parts"] = [json.loads(claim_canonical(p)) for p in claim.parts]
    if claim.by:  # only then: the fingerprints of every other claim stay as registered
        content["by"] = claim.by
    return json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)


def claim_fingerprint(claim: Claim, default_margin: float | None = None) -> str:
    """sha256 (hex) of :func:`claim_canonical`: equal exactly when the claim tests the same."""
    import hashlib

    return hashlib.sha256(claim_canonical(claim, default_margin).encode()).hexdigest()
