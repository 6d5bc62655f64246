"""What a scale ladder asks of a study's claims, checked at plan time when the study loads
(:func:`check_ladder_claims`): pure rules over the parsed claims and the study's axes, so the
study imports no statistics (those are :mod:`ablate.claims.trend`'s, for deciding)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ablate.claims.spec import FITTED, RUNG, TREND, Claim
from ablate.errors import ConfigError


def check_ladder_claims(claims: list[Claim], source: Path, axes: dict[str, list[Any]]) -> None:
    """What a ladder asks of a study's claims, checked at plan time (one line naming
    ``claims[i].<key>``): a trend spans a ladder of at least 3 rungs (at two, the error names
    the interaction that asks it: :data:`AT_TWO`), compares two arms of the study (or an
    interaction) with no rung in ``a``/``b``/``where``/``by``, and a ``flat`` one
    states its margin (nats per decade of training FLOPs); every other claim of a ladder study
    compares its arms at one rung, since pooling the rungs would average models of different
    sizes (``where: {rung: ...}``, a rung in each arm, or ``by:`` over two rungs)."""
    for i, claim in enumerate(claims):
        where = f"claims[{i}]"
        if claim.expect in TREND:
            _check_trend(claim, where, source, axes)
        elif RUNG in axes and RUNG not in claim.by:
            arms = [claim.a, *([claim.b] if claim.b else []), *(p.a for p in claim.parts)]
            if not all(RUNG in {**claim.where, **arm} for arm in arms):
                raise ConfigError(
                    f"a ladder study compares arms at one rung: add {RUNG} to where (e.g. "
                    f"where: {{{RUNG}: {axes[RUNG][-1]}}}); only a trend claim (expect: "
                    "grows/shrinks/flat) spans the rungs",
                    key=f"{where}.where",
                    source=source,
                )


TREND_RUNGS = 3
"""A trend's fewest rungs: the gap must move between two pairs of them (and a slope through two
points per seed has no error to test it against)."""
AT_TWO = {"grows": "larger", "shrinks": "smaller", "flat": "equal"}
"""The interaction that asks a trend's question at two sizes: the gap a - b larger, smaller or
equal (within a margin) at the larger size than at the smaller
(:mod:`ablate.claims.interaction`)."""


def _at_two(claim: Claim, rungs: list[Any]) -> str:
    """The claim that answers ``claim`` at two sizes, in words for the error."""
    alt = AT_TWO[claim.expect]
    big, small = (rungs[-1], rungs[0]) if len(rungs) == 2 else ("<larger>", "<smaller>")
    axis = RUNG if len(rungs) == 2 else "<the size axis>"
    margin = " and a margin" if alt == "equal" else ""
    return (
        f"at two sizes ask it as an interaction: expect: {alt} with by: {{{axis}: [{big}, "
        f"{small}]}}{margin}, a and b as here"
    )


def _check_trend(claim: Claim, where: str, source: Path, axes: dict[str, list[Any]]) -> None:
    rungs = list(axes.get(RUNG) or [])
    if len(rungs) < TREND_RUNGS:
        have = f"this ladder has {len(rungs)}" if rungs else "this study has no ladder:"
        raise ConfigError(
            f"expect: {claim.expect} is a trend: it needs a ladder of at least {TREND_RUNGS} "
            f"rungs ({have}); {_at_two(claim, rungs)}",
            key=f"{where}.expect",
            source=source,
        )
    if claim.metric in FITTED or claim.external:
        raise ConfigError(
            "a trend compares per-run metrics of two arms of the study at every rung",
            key=f"{where}.{'metric' if claim.metric in FITTED else 'b'}",
            source=source,
        )
    for key in ("a", "b", "where", "by"):
        if RUNG in getattr(claim, key):
            raise ConfigError(
                f"a trend spans every rung: {RUNG} cannot be in {key}",
                key=f"{where}.{key}.{RUNG}",
                source=source,
            )
    if claim.expect == "flat" and claim.margin is None:
        raise ConfigError(
            "a flat trend states its margin: the slope (nats per decade of training FLOPs) "
            "that counts as flat",
            key=f"{where}.margin",
            source=source,
        )
