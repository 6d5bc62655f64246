"""The words a claim's outcome is written in (:func:`ablate.claims.checks.decide_claim`), in
one place for the modules that decide outcomes and the report that reads them."""

from __future__ import annotations

REPRODUCES, CONTRADICTED, INCONCLUSIVE, UNTESTED, PENDING = (
    "reproduces",
    "contradicted",
    "inconclusive",
    "not testable",
    "pending",
)
NOT_HERE = "not reproduced at this setting"
"""A claim the paper states for another setting (its ``paper.optimizer``) that these runs
contradict: a result about this setting, not evidence against the paper."""
BY_T_ONLY, BY_EXACT_ONLY = "by t-test only", "by exact test only"
"""A qualified outcome: the outcome one test supports and the other does not reach."""
WITHIN_MARGIN = "different but within margin"
"""An equivalence claim's outcome when the difference is significant but its whole 95% CI lies
inside ±margin: a real difference too small to matter, so the "no difference" holds in
practice."""


THRESHOLD, NOT_A_TREND = "a threshold, not a trend", "not a trend"
"""A ``grows``/``shrinks`` claim whose gap does not move the claimed way at every step between
rungs (:mod:`ablate.claims.trend`): it moves that way at exactly one step and never back after
it (a threshold between those two rungs), or at several with a step the other way among them.
Both are findings, decided like a contradiction."""
