"""Interaction claims (the effect of a vs b is smaller/larger/equal at one value of an axis than
at another): parsed with one-line errors, tested on the per-seed difference of differences and
checked against a hand computation; decided in the study's Holm family."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from scipy import stats

from ablate.claims.outcomes import analyse, pilot
from ablate.claims.spec import claim_fingerprint
from ablate.config import ConfigError
from ablate.report import build_reports
from ablate.report.answer import fmt_effect
from ablate.results import read_study
from ablate.study import load_study as plan_study

NP, WU = "model.norm_placement", "optim.warmup_ratio"
GRID = {NP: ["post", "pre"], WU: [0.0, 0.1]}
SEEDS = [0, 1, 2, 3, 4]
# final loss per (placement, warmup) and seed: Post-LN pays ~0.5 nats for no warmup, Pre-LN
# ~0.05, with seed noise chosen by hand
FINALS = {
    ("post", 0.0): [2.60, 2.45, 2.70, 2.52, 2.58],
    ("post", 0.1): [2.05, 2.02, 2.10, 2.01, 2.07],
    ("pre", 0.0): [2.11, 2.08, 2.12, 2.05, 2.10],
    ("pre", 0.1): [2.06, 2.04, 2.05, 2.03, 2.02],
}
SHRINKS = {
    "id": "pre-shrinks-warmup-penalty",
    "text": "Pre-LN shrinks the penalty of skipping warmup",
    "expect": "smaller",
    "a": {WU: 0.0},
    "b": {WU: 0.1},
    "by": {NP: ["pre", "post"]},
}
POST = {
    "id": "post-needs-warmup",
    "text": "Post-LN needs warmup",
    "expect": "better",
    "a": {WU: 0.1},
    "b": {WU: 0.0},
    "where": {NP: "post"},
}


def _spec(path, claims):
    path.write_text(
        yaml.safe_dump(
            {"name": "np", "grid": GRID, "seeds": SEEDS, "claims": claims}, sort_keys=False
        )
    )
    return path


@pytest.fixture
def store(tmp_path, write_run):
    root = tmp_path / "runs"
    for (placement, warmup), finals in FINALS.items():
        for seed, final in zip(SEEDS, finals, strict=True):
            write_run(root, "np", {NP: placement, WU: warmup}, seed, "completed", final)
    return root


def _hand():
    """The difference of differences by hand: per seed, (pre's penalty) - (post's penalty)."""
    c = {k: np.array(v) for k, v in FINALS.items()}
    d = (c[("pre", 0.0)] - c[("pre", 0.1)]) - (c[("post", 0.0)] - c[("post", 0.1)])
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    se = sd / math.sqrt(n)
    t = mean / se
    p = 2 * stats.t.sf(abs(t), n - 1)
    half = stats.t.ppf(0.975, n - 1) * se
    return d, mean, sd, t, p, (mean - half, mean + half)


def test_an_interaction_is_the_paired_t_of_the_difference_of_differences(tmp_path, store):
    d, mean, sd, t, p, (lo, hi) = _hand()
    assert mean == pytest.approx(-0.468)  # 0.052 - 0.52: the numbers above, by eye too
    spec = _spec(tmp_path / "np.yaml", [SHRINKS, POST])
    study = read_study(store, "np", spec)
    _, checks = analyse(study)
    check, post = checks
    c = check.comparison
    assert c.a == pytest.approx(tuple(d)) and c.n_a == 5
    assert c.diff == pytest.approx(mean) and c.sd == pytest.approx(sd)
    assert c.t == pytest.approx(t) and c.p == pytest.approx(p)
    assert (c.ci_lo, c.ci_hi) == pytest.approx((lo, hi))
    assert c.context["e1"] == pytest.approx(0.052) and c.context["e2"] == pytest.approx(0.52)
    # one Holm family with the study's other claim: the smaller p is doubled
    ps = sorted([p, post.comparison.p])
    assert c.p_adj == pytest.approx(min(1.0, 2 * ps[0]) if p == ps[0] else max(2 * ps[0], ps[1]))
    # two claims: the exact sign-flip's Holm p is 2 x 2/2^5 = 0.125, so the t-test alone decides
    assert c.family == 2 and c.p_flip_adj == 0.125
    assert check.outcome == "reproduces by t-test only"
    # the reverse question ("larger") is contradicted by the same numbers
    larger = dict(SHRINKS, id="larger", expect="larger")
    (back,) = analyse(read_study(store, "np", _spec(tmp_path / "b.yaml", [larger])))[1]
    assert back.outcome == "contradicted by t-test only" and back.comparison.p == pytest.approx(p)
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    text = (path.parent / "provenance.md").read_text()
    assert "difference of differences -0.468" in text
    assert "effect of warmup_ratio=0 vs 0.1: 0.052 nats at norm_placement=pre" in text
    # the Answer: the larger effect first (at post), so the difference of differences is +0.468
    row = next(x for x in path.read_text().splitlines() if x.startswith(f"| {SHRINKS['id']} |"))
    cells = [x.strip() for x in row.strip("|").split("|")]
    assert cells[1] == "(warmup_ratio=0 − 0.1) at norm_placement=post − at pre"
    assert cells[2] == "{} [{}, {}]".format(*fmt_effect(-mean, -hi, -lo)) and cells[3] == "5"


def test_equal_is_tost_on_the_difference_of_differences(tmp_path, store):
    d, mean, sd, *_ = _hand()
    equal = dict(SHRINKS, id="eq", expect="equal", margin=0.6)
    (check,) = analyse(read_study(store, "np", _spec(tmp_path / "np.yaml", [equal])))[1]
    se, df = sd / math.sqrt(len(d)), len(d) - 1
    p_tost = max(stats.t.sf((mean + 0.6) / se, df), stats.t.cdf((mean - 0.6) / se, df))
    assert check.comparison.p_tost == pytest.approx(p_tost, rel=1e-6)
    # significant (p < 0.05) with its CI inside ±0.6: a difference too small to matter, by the
    # t-test; the exact test cannot find the difference at 5 seeds (floor 2/32), but its two
    # one-sided sign-flips at ±0.6 reach their floor 1/32: equivalent by both tests
    assert check.t_outcome == "different but within margin"
    assert (np.abs(d) < 0.6).all() and check.comparison.p_flip_tost == 1 / 32
    assert check.exact_outcome == "reproduces" and check.outcome == "reproduces"
    assert "equivalent within ±0.6 by both tests" in check.why


def test_seeds_needed_counts_seeds_of_the_four_cells(tmp_path, write_run):
    root = tmp_path / "runs"
    noisy = {k: v[:3] for k, v in FINALS.items()} | {("post", 0.0): [2.60, 2.05, 3.10]}
    for (placement, warmup), finals in noisy.items():
        for seed, final in zip(SEEDS[:3], finals, strict=True):
            write_run(root, "np", {NP: placement, WU: warmup}, seed, "completed", final)
    (check,) = analyse(read_study(root, "np", _spec(tmp_path / "np.yaml", [SHRINKS])))[1]
    assert check.outcome == "inconclusive"
    assert check.seeds_needed is not None and "four cells" in check.seeds_needed.unit


def test_register_and_report_need_the_same_seeds_from_the_same_runs(
    tmp_path, write_run, mark_confirm
):
    """The pilot ``ablate register`` records and the report's line compute seeds needed with
    one function from the same seeds: every seed of the claim's cells. Here three noisy
    confirmation seeds (3, 4 and a wild 2) leave the interaction undecided: the report assumes
    the difference and SD over all five seeds, exactly what a pilot of those five says."""
    noisy = {k: list(v) for k, v in FINALS.items()}
    noisy[("post", 0.0)][2] = 3.4  # one seed's penalty far off
    noisy[("pre", 0.0)][3] = 2.40
    for store in (tmp_path / "all", tmp_path / "confirmed"):
        for (placement, warmup), finals in noisy.items():
            for seed, final in zip(SEEDS, finals, strict=True):
                write_run(store, "np", {NP: placement, WU: warmup}, seed, "completed", final)
    mark_confirm(tmp_path / "confirmed", "np", {2, 3, 4}, "unregistered")
    spec = _spec(tmp_path / "np.yaml", [SHRINKS])
    (check,) = analyse(read_study(tmp_path / "confirmed", "np", spec))[1]
    assert check.confirmation and check.comparison.n_a == 3 and check.outcome == "inconclusive"
    pilot_of_all = read_study(tmp_path / "all", "np", spec)  # five exploratory seeds
    said, needs = pilot(pilot_of_all)
    said, need = said[SHRINKS["id"]], needs[SHRINKS["id"]]
    assert need.text() in said and "over the 5 seeds of its arms" in need.assumption
    assert check.seeds_needed.n == need.n
    assert check.seeds_needed.assumption.replace("all", "the") == need.assumption


def test_a_confirmation_registers_the_by_axis(tmp_path):
    spec = _spec(tmp_path / "np.yaml", [SHRINKS])
    (claim,) = plan_study(spec, check_data=False).claims
    assert claim.by == {NP: ["pre", "post"]}
    swapped = _spec(tmp_path / "s.yaml", [dict(SHRINKS, by={NP: ["post", "pre"]})])
    (other,) = plan_study(swapped, check_data=False).claims
    assert claim_fingerprint(claim) != claim_fingerprint(other)


@pytest.mark.parametrize(
    ("change", "key", "message"),
    [
        ({"by": None}, "claims[0].by", "must name one axis and its two values"),
        ({"by": {NP: ["pre"]}}, f"claims[0].by.{NP}", "must list two different values"),
        ({"by": {NP: ["pre", "mid"]}}, f"claims[0].by.{NP}[1]", "'mid' is not a value"),
        ({"by": {"model.nope": ["a", "b"]}}, "claims[0].by.model.nope", "not an axis"),
        ({"expect": "better"}, "claims[0].by", "expect: smaller/larger/equal and by: go"),
        ({"a": {WU: [0.0, 0.1]}}, f"claims[0].a.{WU}", "one value per axis"),
        ({"b": {NP: "pre"}}, "claims[0].b", "a and b must set the same axes"),
        ({"where": {NP: "pre"}}, "claims[0].by", "cannot also be in a, b or where"),
    ],
)
def test_bad_interactions_are_one_line_naming_file_and_key(tmp_path, change, key, message):
    claim = {k: v for k, v in {**SHRINKS, **change}.items() if v is not None or k != "by"}
    if change.get("by", 0) is None:
        claim["by"] = "pre"
    if change.get("expect") == "better":
        claim.pop("by")
        claim["by"] = SHRINKS["by"]
    spec = _spec(tmp_path / "s.yaml", [claim])
    with pytest.raises(ConfigError) as err:
        plan_study(spec, check_data=False)
    assert str(err.value).startswith(f"{spec}: {key}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_an_interactions_cells_that_learned_nothing_are_named(tmp_path, store):
    """A cell whose runs ended at the unigram loss (marked as the results layer marks them)
    is counted in the difference of differences and named in its numbers."""
    from ablate.claims.verdicts import numbers

    study = read_study(store, "np", _spec(tmp_path / "np.yaml", [SHRINKS]))
    cell = (study.runs[NP] == "post") & (study.runs[WU] == 0.0)
    study.runs["learned_nothing"] = cell.astype(float)
    (check,) = analyse(study)[1]
    assert check.comparison.diff == pytest.approx(_hand()[1])  # its losses count
    text = numbers(check, "nats")
    assert "warmup_ratio=0, norm_placement=post learned nothing in 5/5 seeds" in text
