"""Trend claims over a scale ladder (the gap between two arms grows, shrinks or stays flat per
decade of training compute): recomputed from synthetic stores with a known slope by scipy and
numpy directly, decided in the study's Holm family, with one-line errors for bad claims."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import yaml
from scipy import stats

from ablate.claims.outcomes import analyse
from ablate.claims.trend import slope_tests
from ablate.config import ConfigError
from ablate.results import read_study
from ablate.study import load_study

NP = "model.norm_placement"
RUNGS = {"small": 1, "medium": 2, "large": 4}  # rung -> n_layers (a config key, not an axis)
LOG_FLOPS = {"small": 12.0, "medium": 12.5, "large": 13.5}  # log10 training FLOPs per rung
SEEDS = [0, 1, 2, 3, 4, 5]
TOKENS = 100 * 12 * 32  # steps x batch x seq_len of a synthetic run (conftest)


def _spec(path, claims, margin=None, rungs=None, seeds=None):
    spec = {
        "name": "lad",
        "base": {
            "model.d_model": 32,
            "model.n_heads": 2,
            "model.max_seq_len": 32,
            "data.seq_len": 32,
        },
        "ladder": {
            "rungs": [
                {"name": r, "set": {"model.n_layers": n}} for r, n in (rungs or RUNGS).items()
            ],
            "steps": 100,
        },
        "grid": {NP: ["post", "pre"]},
        "seeds": seeds or SEEDS,
        "claims": claims,
    }
    if margin is not None:
        spec["equivalence_margin"] = margin
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _claim(expect, **kw):
    return {
        "id": f"gap-{expect}",
        "text": "the Post-LN gap moves with compute",
        "expect": expect,
        "a": {NP: "post"},
        "b": {NP: "pre"},
        **kw,
    }


def _gaps(slope: float, noise: float, seed: int = 7) -> dict[tuple[int, str], float]:
    """(seed, rung) -> gap post - pre: ``slope`` per decade from the first rung, plus noise."""
    rng = np.random.default_rng(seed)
    return {
        (s, r): 0.1 + slope * (LOG_FLOPS[r] - 12.0) + noise * rng.standard_normal()
        for s in SEEDS
        for r in RUNGS
    }


def _layers(log_flops: dict[str, float]) -> dict[str, int]:
    """Rung -> its n_layers: :data:`RUNGS` for the three rungs, else 1, 2, 3, ... in order."""
    return RUNGS if list(log_flops) == list(RUNGS) else {r: i + 1 for i, r in enumerate(log_flops)}


def _store(root, write_run, gaps, lost=None, log_flops=None):
    """Both arms at every rung and seed; Pre-LN's loss 2.0 + noise, Post-LN's that plus the
    gap; ``lost``: (seed, rung) whose Post-LN run diverged; ``log_flops``: rung -> log10
    training FLOPs (its n_layers: its place in that order)."""
    rng = np.random.default_rng(0)
    log_flops = log_flops or LOG_FLOPS
    for (seed, rung), gap in gaps.items():
        pre = 2.0 + 0.05 * rng.standard_normal()
        flops = 10 ** log_flops[rung] / TOKENS  # flops_per_token giving the rung's FLOPs
        for placement, final in (("pre", pre), ("post", pre + gap)):
            status = "diverged" if placement == "post" and (seed, rung) == lost else "completed"
            write_run(
                root,
                "lad",
                {"rung": rung, NP: placement},
                seed,
                status,
                final,
                div_step=40,
                config={"model.n_layers": _layers(log_flops)[rung]},
                fields={"flops_per_token": flops},
            )
    return root


def _reference(gaps, margin, skip=()):
    """scipy/numpy: per seed the least-squares slope of its gaps on log10 FLOPs
    (``scipy.stats.linregress``), then the one-sample t of the slopes, its 95% t-interval
    and TOST at ±margin (two one-sided one-sample t-tests)."""
    x = np.array([LOG_FLOPS[r] for r in RUNGS])
    slopes = np.array(
        [stats.linregress(x, [gaps[(s, r)] for r in RUNGS]).slope for s in SEEDS if s not in skip]
    )
    t = stats.ttest_1samp(slopes, 0.0)
    ci = t.confidence_interval(0.95)
    tost = max(
        stats.ttest_1samp(slopes, -margin, alternative="greater").pvalue,
        stats.ttest_1samp(slopes, margin, alternative="less").pvalue,
    )
    return slopes, float(t.pvalue), (float(ci.low), float(ci.high)), float(tost)


def _check(tmp_path, store, claims, margin=None):
    spec = _spec(tmp_path / "lad.yaml", claims, margin)
    return analyse(read_study(store, "lad", spec))[1]


def test_a_growing_gap_is_detected_with_the_slope_scipy_computes(tmp_path, write_run):
    gaps = _gaps(slope=0.3, noise=0.03)
    store = _store(tmp_path / "runs", write_run, gaps)
    slopes, p, (lo, hi), _ = _reference(gaps, 0.01)
    assert slopes.mean() == pytest.approx(0.3, abs=0.05)  # the known slope, seen through noise
    (check,) = _check(tmp_path, store, [_claim("grows")])
    c = check.comparison
    assert c.a == pytest.approx(tuple(slopes)) and c.n_a == len(SEEDS)
    assert c.diff == pytest.approx(slopes.mean()) and c.sd == pytest.approx(slopes.std(ddof=1))
    assert c.p == pytest.approx(p) and (c.ci_lo, c.ci_hi) == pytest.approx((lo, hi))
    assert c.context["x"] == pytest.approx([12.0, 12.5, 13.5])
    assert c.context["rungs"] == ["small", "medium", "large"]
    # the t-test decides the slope and both steps; the sign-flip test decides the slope, but
    # Holm over the two steps doubles each step's floor 2/2^6 to 0.0625
    assert check.t_outcome == "reproduces" and check.exact_outcome == "inconclusive"
    assert check.outcome == "reproduces by t-test only"
    assert "6 seeds cannot bring a step's exact Holm p below 0.062: 7 seeds can" in check.why
    # the reverse expectation is contradicted by the same numbers
    (back,) = _check(tmp_path, store, [_claim("shrinks")])
    assert back.outcome == "contradicted" and back.comparison.p == pytest.approx(p)


def test_a_flat_gap_passes_tost_on_the_slope(tmp_path, write_run):
    gaps = _gaps(slope=0.0, noise=0.01)
    store = _store(tmp_path / "runs", write_run, gaps)
    slopes, _, _, tost = _reference(gaps, 0.05)
    assert tost < 0.05  # scipy: the slopes lie within ±0.05 per decade
    (check,) = _check(tmp_path, store, [_claim("flat", margin=0.05)])
    assert check.comparison.p_tost == pytest.approx(tost, rel=1e-6)
    assert check.outcome == "reproduces" and "TOST within ±0.05" in check.why
    from ablate.report.answer import claim_row

    row = claim_row(check)  # the report table shows TOST first, for both tests
    assert "(TOST), " in row["Holm p"] and row["exact Holm p"].startswith("sign-flip: ")
    assert "(TOST), " in row["exact Holm p"] and check.exact_outcome == "reproduces"
    # a flat gap contradicts "grows": its slope is equivalent to zero within the margin
    (grows,) = _check(tmp_path, store, [_claim("grows", margin=0.05)])
    assert grows.outcome == "contradicted"
    # and a growing gap is not flat: significant, its CI wholly outside ±0.05
    store2 = _store(tmp_path / "runs2", write_run, _gaps(slope=0.3, noise=0.03))
    (steep,) = _check(tmp_path, store2, [_claim("flat", margin=0.05)])
    assert steep.outcome == "contradicted" and "wholly outside" in steep.why


def _enumerated_flip_p(d: np.ndarray, shift: float, side: str) -> float:
    """The sign-flip p by listing all 2^n sign patterns of ``d - shift`` (mean statistic)."""
    x = d - shift
    obs = x.mean()
    means = np.array([np.mean(np.array(s) * x) for s in itertools.product((1, -1), repeat=len(x))])
    if side == "two-sided":
        hits = np.abs(means) >= abs(obs) - 1e-12
    elif side == "greater":
        hits = means >= obs - 1e-12
    else:
        hits = means <= obs + 1e-12
    return float(hits.mean())


def test_slope_tests_are_the_one_sample_t_and_the_sign_flip_test_of_the_slopes():
    slopes = np.array([0.31, 0.12, 0.25, -0.05, 0.4, 0.2])
    c = slope_tests(slopes, list(range(6)), 0.5, "slope", key=("trend", "x"))
    ref = stats.ttest_1samp(slopes, 0.0)
    ci = ref.confidence_interval(0.95)
    assert c.test == "one-sample t" and c.exact == "sign-flip"
    assert c.p == pytest.approx(ref.pvalue) and (c.ci_lo, c.ci_hi) == pytest.approx(ci)
    # the exact test: every one of the 2^6 sign patterns of the slopes, listed by hand
    assert c.p_flip == pytest.approx(_enumerated_flip_p(slopes, 0.0, "two-sided"))
    # by hand: the sum 1.23 is reached only as observed and with -0.05 flipped (1.33), and
    # mirrored: 4 of 64 patterns
    assert c.p_flip == pytest.approx(4 / 64)
    tost = max(_enumerated_flip_p(slopes, -0.5, "greater"), _enumerated_flip_p(slopes, 0.5, "less"))
    assert c.p_flip_tost == pytest.approx(tost) and c.p_flip_tost == pytest.approx(1 / 64)


def test_a_trend_is_decided_by_both_tests_and_names_the_one_that_alone_supports_it(
    tmp_path, write_run
):
    """6 seeds: the sign-flip test's floor is 2/2^6 = 0.031, alone below 0.05, but in a
    family of 2 claims Holm doubles it to 0.0625: the t-test reproduces, the exact test cannot,
    and the outcome says so, with the 7 seeds that would let both decide."""
    gaps = _gaps(slope=0.3, noise=0.03)
    store = _store(tmp_path / "runs", write_run, gaps)
    top = {
        "id": "pre-wins-at-large",
        "text": "Pre-LN wins at the largest rung",
        "expect": "better",
        "a": {NP: "pre"},
        "b": {NP: "post"},
        "where": {"rung": "large"},
    }
    trend, _ = _check(tmp_path, store, [_claim("grows"), top])
    c = trend.comparison
    assert c.p_flip == pytest.approx(2 / 64) and c.p_flip_adj == pytest.approx(4 / 64)
    assert (trend.t_outcome, trend.exact_outcome) == ("reproduces", "inconclusive")
    assert trend.outcome == "reproduces by t-test only"
    assert "6 seeds cannot go below p=0.031" in trend.why
    # 7: one more than the 6 that did not decide it, and the fewest seeds whose sign-flip test
    # can go below Holm's first level 0.025 (2/2^7 = 0.016)
    assert trend.seeds_needed.n == 7
    from ablate.claims.verdicts import numbers

    assert "exact sign-flip p=0.031, Holm p=0.062" in numbers(trend, "nats")
    # alone in its family the slope's exact test reaches the level, but not each step's
    (alone,) = _check(tmp_path, store, [_claim("grows")])
    assert alone.comparison.p_flip_adj == pytest.approx(2 / 64)
    assert alone.exact_outcome == "inconclusive" and "not every step" in alone.why


def test_trend_claims_join_the_holm_family_and_count_a_lost_seed(tmp_path, write_run):
    gaps = _gaps(slope=0.3, noise=0.03)
    store = _store(tmp_path / "runs", write_run, gaps, lost=(2, "medium"))
    slopes, p, _, _ = _reference(gaps, 0.01, skip={2})
    top = {
        "id": "pre-wins-at-large",
        "text": "Pre-LN wins at the largest rung",
        "expect": "better",
        "a": {NP: "pre"},
        "b": {NP: "post"},
        "where": {"rung": "large"},
    }
    trend, other = _check(tmp_path, store, [_claim("grows"), top])
    c = trend.comparison
    assert c.n_a == len(SEEDS) - 1 and c.context["lost"] == 1  # seed 2 left out, counted
    assert c.p == pytest.approx(p) and c.family == 2
    ps = sorted([p, other.comparison.p])
    expected = min(1.0, 2 * ps[0]) if p == ps[0] else max(min(1.0, 2 * ps[0]), ps[1])
    assert c.p_adj == pytest.approx(expected)


def test_an_undecided_trend_gets_seeds_from_the_power_machinery(tmp_path, write_run):
    gaps = _gaps(slope=0.06, noise=0.1, seed=8)
    store = _store(tmp_path / "runs", write_run, gaps)
    (check,) = _check(tmp_path, store, [_claim("grows")])
    assert check.outcome == "inconclusive"
    need = check.seeds_needed
    assert need.unit == "seeds (each training both arms at every rung, paired)"
    slopes, *_ = _reference(gaps, 0.01)
    # the one-sample t-test's power at the observed mean and SD of the slopes, by statsmodels
    from statsmodels.stats.power import TTestPower

    d = abs(slopes.mean()) / slopes.std(ddof=1)
    n = TTestPower().solve_power(effect_size=d, alpha=0.05, power=0.8)
    assert need.n == math.ceil(n) == 18


# --- the gap at every rung, every step tested ----------------------------------------------------

SEVEN = list(range(7))  # 2/2^7 = 0.016: below Holm's 0.025 for the first of two steps


def _rung_store(root, write_run, means, noise, log_flops=None):
    """Seven seeds' gaps post - pre: each rung's mean in ``means`` (rungs in order of
    ``log_flops``) plus noise."""
    rng = np.random.default_rng(3)
    log_flops = log_flops or LOG_FLOPS
    gaps = {
        (s, r): m + noise * rng.standard_normal()
        for s in SEVEN
        for r, m in zip(log_flops, means, strict=True)
    }
    _store(root, write_run, gaps, log_flops=log_flops)
    return gaps


def _decide(tmp_path, store, claims, nothing_rung=None, log_flops=None):
    """The claims decided on seven seeds; ``nothing_rung``: the rung whose Post-LN runs are
    marked as the results layer marks runs that learned nothing (the synthetic runs' data is
    no corpus to compute a unigram loss from)."""
    rungs = _layers(log_flops or LOG_FLOPS)
    spec = _spec(tmp_path / "lad.yaml", claims, rungs=rungs, seeds=SEVEN)
    study = read_study(store, "lad", spec)
    if nothing_rung is not None:
        post = (study.runs["rung"] == nothing_rung) & (study.runs[NP] == "post")
        study.runs["learned_nothing"] = post.astype(float)
    return analyse(study)[1]


def _step_reference(gaps, seeds, lo, hi):
    """scipy: the step ``gap(hi) - gap(lo)`` per seed, its one-sample t-test and 95% CI."""
    d = np.array([gaps[(s, hi)] - gaps[(s, lo)] for s in seeds])
    t = stats.ttest_1samp(d, 0.0)
    ci = t.confidence_interval(0.95)
    return d, float(t.pvalue), (float(ci.low), float(ci.high))


def test_every_rung_has_its_gap_and_ci_and_every_step_its_tests_by_scipy(tmp_path, write_run):
    gaps = _rung_store(tmp_path / "runs", write_run, [0.0, 0.2, 0.5], 0.02)
    (check,) = _decide(tmp_path, tmp_path / "runs", [_claim("grows")])
    ctx = check.comparison.context
    for r, (m, lo, hi) in zip(RUNGS, ctx["gap_ci"], strict=True):
        g = np.array([gaps[(s, r)] for s in SEVEN])
        ci = stats.ttest_1samp(g, 0.0).confidence_interval(0.95)
        assert (m, lo, hi) == pytest.approx((g.mean(), ci.low, ci.high))
    ps = []
    for st, (lo, hi) in zip(ctx["steps"], [("small", "medium"), ("medium", "large")], strict=True):
        d, p, ci = _step_reference(gaps, SEVEN, lo, hi)
        assert (st["from"], st["to"], st["n"]) == (lo, hi, 7)
        assert st["diff"] == pytest.approx(d.mean()) and (st["lo"], st["hi"]) == pytest.approx(ci)
        assert st["p"] == pytest.approx(p)
        assert st["p_flip"] == pytest.approx(_enumerated_flip_p(d, 0.0, "two-sided"))
        ps.append((p, st["p_flip"]))
    # Holm over the two steps, by hand: the smaller p doubled, the larger at least that
    for k, name in enumerate(("p_holm", "p_flip_holm")):
        small, large = sorted(x[k] for x in ps)
        want = {small: min(1.0, 2 * small), large: max(min(1.0, 2 * small), large)}
        assert [st[name] for st in ctx["steps"]] == pytest.approx([want[x[k]] for x in ps])
    # both steps up, by both tests: it grows, plainly
    assert check.outcome == "reproduces"
    from ablate.claims.verdicts import numbers

    text = numbers(check, "nats")
    assert "mean gap per rung (95% CI): small " in text and "small → medium " in text


def test_a_jump_at_one_step_is_a_threshold_not_a_trend(tmp_path, write_run):
    """The shipped ladder's shape: the gap dips a little, then jumps at the last step where
    Post-LN learned nothing. The slope is steep and tight, but the gap does not grow at every
    step: the outcome says it is a threshold, and where."""
    gaps = _rung_store(tmp_path / "runs", write_run, [-0.01, -0.07, 1.48], 0.01)
    (check,) = _decide(tmp_path, tmp_path / "runs", [_claim("grows")], nothing_rung="large")
    c = check.comparison
    assert c.p_adj < 0.05 and c.diff > 1  # the slope alone would say "grows"
    _, p1, _ = _step_reference(gaps, SEVEN, "small", "medium")
    assert p1 < 0.025  # scipy: the first step is significantly down
    assert check.t_outcome == check.exact_outcome == "a threshold, not a trend"
    assert check.outcome == "a threshold, not a trend"
    assert check.why.startswith("a threshold between medium and large: the gap norm_placement")
    assert "shrinks from small to medium (-0.06" in check.why
    assert "grows from medium to large (+1.5" in check.why
    assert "at large, norm_placement=post learned nothing in 7/7 seeds" in check.why
    assert check.seeds_needed is None  # decided: a finding, no seeds asked for
    from ablate.report.answer import sentence

    assert sentence(check, "nats").endswith("a threshold, not a trend.")
    # shrinks is contradicted by the slope itself, whatever the steps
    (back,) = _decide(tmp_path, tmp_path / "runs", [_claim("shrinks")])
    assert back.outcome == "contradicted"


@pytest.mark.parametrize(
    ("means", "outcome", "why"),
    [
        # up, then back down: not a threshold (it falls back after the jump), not a trend
        ([0.0, 1.0, 0.8, 1.8], "not a trend", "shrinks from L3 to L4"),
        # up at one step, flat at the other: the slope holds, the second step is not shown
        ([0.0, 0.5, 0.5], "inconclusive", "moves neither way significantly from medium to large"),
    ],
)
def test_a_gap_that_does_not_move_one_way_at_every_step_says_where(
    tmp_path, write_run, means, outcome, why
):
    log_flops = LOG_FLOPS
    if len(means) == 4:
        log_flops = {"small": 12.0, "L3": 12.5, "L4": 13.0, "large": 13.5}
    _rung_store(tmp_path / "runs", write_run, means, 0.01, log_flops)
    (check,) = _decide(tmp_path, tmp_path / "runs", [_claim("grows")], log_flops=log_flops)
    assert check.comparison.p_adj < 0.05  # the slope is significantly up in both
    assert check.outcome == outcome and why in check.why


@pytest.mark.parametrize(
    ("claim", "key", "message"),
    [
        (_claim("flat"), "claims[0].margin", "a flat trend states its margin"),
        (_claim("grows", where={"rung": "large"}), "claims[0].where.rung", "spans every rung"),
        (
            {**_claim("better"), "expect": "better"},
            "claims[0].where",
            "compares arms at one rung",
        ),
        (_claim("grows", b={"values": [2.0]}), "claims[0].b", "two arms of the study"),
    ],
)
def test_bad_trend_claims_are_one_line_errors(tmp_path, claim, key, message):
    with pytest.raises(ConfigError) as err:
        load_study(_spec(tmp_path / "lad.yaml", [claim]), check_data=False)
    assert err.value.key == key and message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_trend_needs_a_ladder(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump({"grid": {NP: ["post", "pre"]}, "claims": [_claim("grows")]}))
    with pytest.raises(ConfigError) as err:
        load_study(path, check_data=False)
    assert err.value.key == "claims[0].expect"
    assert "needs a ladder of at least 3 rungs (this study has no ladder:)" in str(err.value)
    assert "expect: larger with by: {<the size axis>: [<larger>, <smaller>]}" in str(err.value)


def test_the_report_shows_the_slope_the_figure_the_extrapolation_and_every_rung(
    tmp_path, write_run
):
    from ablate.report import build_reports
    from ablate.report.answer import fmt_effect

    gaps = _gaps(slope=0.3, noise=0.03)
    store = _store(tmp_path / "runs", write_run, gaps)
    slopes, *_ = _reference(gaps, 0.01)
    spec = _spec(tmp_path / "lad.yaml", [_claim("grows")])
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    text, prov = path.read_text(), (path.parent / "provenance.md").read_text()
    assert f"slope {slopes.mean():.3g} nats per decade of training FLOPs" in prov
    # the extrapolation by hand: each seed's line one rung spacing (0.75 decades) past 13.5
    x = np.array([LOG_FLOPS[r] for r in RUNGS])
    at = 13.5 + (13.5 - 12.0) / 2
    preds = [np.polyval(np.polyfit(x, [gaps[(s, r)] for r in RUNGS], 1), at) for s in SEEDS]
    assert f"not measured): {np.mean(preds):.3g} [" in prov and f"at {10**at:.3g} FLOPs" in prov
    assert "3 rungs: small (51,000 parameters, 38,400 tokens, 1e+12 training FLOPs)" in text
    assert "large (51,000 parameters, 38,400 tokens, 3.16e+13 training FLOPs)" in text
    assert "`rung` (small, medium, large)" in text  # in order of compute, not of name
    # the Answer's sentence: the slope and its interval at the table's precision
    m, half = slopes.mean(), stats.t.ppf(0.975, len(slopes) - 1) * slopes.std(ddof=1)
    d, lo, hi = fmt_effect(m, m - half / np.sqrt(len(slopes)), m + half / np.sqrt(len(slopes)))
    assert f"changes by {d} nats per decade of FLOPs (95% CI {lo} to {hi}, " in text
    # one figure: the gap against compute beside the per-seed slopes
    assert (path.parent / "claim_gap-grows.png").stat().st_size > 5000
    assert "Left: the gap norm_placement=post − pre of each seed at each rung" in text
    assert "Right: the tested effect, slope of norm_placement=post − pre per decade" in text
    claims = (path.parent / "claims.csv").read_text()
    assert "gap-grows" in claims and "EXTRAPOLATION" in claims
