"""Confirmatory statistics: alpha spending over sequential looks and seeds needed, each checked
against a Monte-Carlo simulation (vectorised, fixed RNG seeds; tolerances stated at each test)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from ablate.claims.checks import (
    CONTRADICTED,
    INCONCLUSIVE,
    REPRODUCES,
    WITHIN_MARGIN,
    ClaimCheck,
    confirmatory_family,
    decide_claim,
)
from ablate.claims.comparisons import PAIRED, STREAMS_DIFFER, Arm, compare
from ablate.claims.outcomes import analyse
from ablate.claims.power import (
    beyond_power,
    claim_seeds_needed,
    diff_power,
    smallest_n,
    tost_power,
)
from ablate.claims.registration import build_registration, registration_path, write_registration
from ablate.claims.sequential import (
    nominal_levels,
    obf_spent,
    planned_fractions,
    spending_table,
)
from ablate.claims.spec import Claim
from ablate.config import DataConfig
from ablate.data.datasets import resolve_dataset
from ablate.data.token_cache import token_splits
from ablate.report import build_reports
from ablate.report.audit import attempt_items
from ablate.report.blocks import progress_line, withdrawn_note
from ablate.results import read_study
from ablate.store import RunStore

ALPHA = 0.05

# --- alpha spending ---------------------------------------------------------------------------


def test_obrien_fleming_spending_by_hand():
    # alpha(t) = 2 - 2 Phi(1.959964 / sqrt(t)): t = 1 spends all of alpha, t = 0.25 spends
    # 2 - 2 Phi(3.919928) = 8.857e-5
    assert obf_spent(1.0, ALPHA) == pytest.approx(ALPHA)
    assert obf_spent(0.25, ALPHA) == pytest.approx(2 * stats.norm.sf(3.919928), rel=1e-5)
    assert obf_spent(0.0, ALPHA) == 0.0
    rows = spending_table(planned_fractions(4), ALPHA)
    assert [r["look"] for r in rows] == [1, 2, 3, 4]
    assert sum(r["nominal_alpha"] for r in rows) == pytest.approx(ALPHA)  # increments add up
    assert rows[-1]["alpha_spent"] == pytest.approx(ALPHA)
    with pytest.raises(ValueError):
        nominal_levels([0.5, 0.4])


def _sequential_t_pvalues(looks: list[int], sims: int, seed: int) -> np.ndarray:
    """Two-sided one-sample t-test p-values at each look of ``sims`` studies under H0 (paired
    per-seed differences ~ N(0, 1)), the seeds accumulating: shape (sims, looks)."""
    n = np.asarray(looks)
    x = np.random.default_rng(seed).standard_normal((sims, n[-1]))
    s1, s2 = np.cumsum(x, 1)[:, n - 1], np.cumsum(x**2, 1)[:, n - 1]
    mean = s1 / n
    var = (s2 - n * mean**2) / (n - 1)
    t = mean / np.sqrt(var / n)
    return 2 * stats.t.sf(np.abs(t), n - 1)


@pytest.mark.parametrize("looks", [[3, 6, 9, 12, 15], [2, 4, 6, 8, 10], [4, 8]])
def test_sequential_looks_keep_the_type_one_error(looks):
    # 100000 simulated studies: Monte-Carlo SE of a rate near 0.05 is sqrt(.05·.95/1e5) =
    # 0.0007; allow 3 SE above alpha
    sims = 100_000
    tol = 3 * math.sqrt(ALPHA * (1 - ALPHA) / sims)
    p = _sequential_t_pvalues(looks, sims, seed=7)
    levels = np.array(nominal_levels([n / looks[-1] for n in looks], ALPHA))
    error = (p < levels).any(axis=1).mean()
    assert error <= ALPHA + tol
    naive = (p < ALPHA).any(axis=1).mean()  # testing at alpha at every look: inflated
    if len(looks) > 2:
        assert naive > 0.1


def test_exact_boundaries_spend_alpha_exactly_on_z_statistics():
    # z statistics of one accumulating sample (Brownian motion in information time): the
    # recursive-integration boundaries spend alpha(t_k) by look k, within 3 Monte-Carlo SE
    t = np.array(planned_fractions(5))
    sims = 200_000
    inc = np.random.default_rng(3).standard_normal((sims, 5)) * np.sqrt(np.diff(t, prepend=0))
    z = np.cumsum(inc, axis=1) / np.sqrt(t)
    crit = stats.norm.isf(np.array(nominal_levels(t, ALPHA, exact=True)) / 2)
    crossed = (np.cumsum(np.abs(z) >= crit, axis=1) > 0).mean(axis=0)
    spent = np.array([obf_spent(x, ALPHA) for x in t])
    assert crossed == pytest.approx(spent, abs=3 * math.sqrt(ALPHA / sims))
    # ...but t-tests on a few seeds have heavier tails: these boundaries exceed alpha there,
    # which is why the per-look increments are the default
    p = _sequential_t_pvalues([2, 4, 6, 8, 10], 100_000, seed=5)
    assert (p < np.array(nominal_levels(t, ALPHA, exact=True))).any(axis=1).mean() > ALPHA


# --- seeds needed, against simulation ----------------------------------------------------------

SIMS = 20_000
"""Per candidate n: the Monte-Carlo SE of a power near 0.8 is sqrt(.8·.2/20000) = 0.003, less
than the power gained by one more seed near these n (0.02-0.04), so the simulated smallest n
can differ from the computed one by at most one seed."""


def _mc_smallest_n(reject, n_max: int, seed: int) -> int:
    """The smallest n whose simulated power (share of ``reject(sample(n))``) reaches 0.8."""
    rng = np.random.default_rng(seed)
    for n in range(2, n_max + 1):
        if reject(rng, n).mean() >= 0.8:
            return n
    raise AssertionError("not reached")


def test_seeds_needed_one_sample_matches_simulation():
    # the fitted exponent per seed ~ N(0.5 + 0.3, 0.4²) tested against 0.5: 0.3 off
    delta, sd = 0.3, 0.4
    n = smallest_n(lambda k: diff_power(k, delta, sd, ALPHA))

    def reject(rng, k):
        x = rng.normal(delta, sd, (SIMS, k))
        return stats.ttest_1samp(x, 0.0, axis=1).pvalue < ALPHA

    assert abs(_mc_smallest_n(reject, n + 3, seed=11) - n) <= 1


def test_seeds_needed_paired_matches_simulation():
    # two arms on the same seeds: a shared per-seed effect (sd 0.05) cancels in the paired test;
    # arm noise sd 0.008 each, so the per-seed differences have sd 0.008·sqrt(2)
    delta, noise = 0.01, 0.008
    n = smallest_n(lambda k: diff_power(k, delta, noise * math.sqrt(2), ALPHA))

    def reject(rng, k):
        shared = rng.normal(0, 0.05, (SIMS, k))
        a = 1.5 + delta + shared + rng.normal(0, noise, (SIMS, k))
        b = 1.5 + shared + rng.normal(0, noise, (SIMS, k))
        return stats.ttest_rel(a, b, axis=1).pvalue < ALPHA

    assert abs(_mc_smallest_n(reject, n + 3, seed=12) - n) <= 1


@pytest.mark.parametrize("delta", [0.003, 0.006])
def test_seeds_needed_tost_matches_simulation(delta):
    # paired differences with sd 0.01, margin ±0.01: showing equivalence needs more seeds the
    # nearer the true difference is to the margin
    sd, margin = 0.01, 0.01
    n = smallest_n(lambda k: tost_power(k, delta, sd, margin, ALPHA))

    def reject(rng, k):  # TOST by its definition: both one-sided t-tests at alpha
        d = rng.normal(delta, sd, (SIMS, k))
        se, df = d.std(axis=1, ddof=1) / math.sqrt(k), k - 1
        p_low = stats.t.sf((d.mean(axis=1) + margin) / se, df)
        p_high = stats.t.cdf((d.mean(axis=1) - margin) / se, df)
        return np.maximum(p_low, p_high) < ALPHA

    assert abs(_mc_smallest_n(reject, n + 3, seed=13) - n) <= 1


def test_beyond_the_margin_and_unreachable():
    # nearer the margin, equivalence needs more seeds (0.003 -> 15, 0.006 -> 41 at sd 0.01)
    assert smallest_n(lambda k: tost_power(k, 0.006, 0.01, 0.01)) > smallest_n(
        lambda k: tost_power(k, 0.003, 0.01, 0.01)
    )
    # a true difference of 2 margins: the 95% CI lies beyond the margin with enough seeds
    assert smallest_n(lambda k: beyond_power(k, 0.02, 0.01, 0.01)) is not None
    # a true difference on the margin: TOST can never reach 80% power
    assert smallest_n(lambda k: tost_power(k, 0.01, 0.01, 0.01, ALPHA)) is None


# --- the confirmatory family, outcomes, registration, confirmation, looks ---------------------

NORM = "model.norm_placement"
POS = "model.pos_encoding"


def _spec(path, grid, claims):
    path.write_text(
        yaml.safe_dump({"name": path.stem, "grid": grid, "seeds": [0, 1, 2], "claims": claims})
    )
    return path


def _claim(cid, a, b, expect="better", **kw):
    return {"id": cid, "text": cid, "expect": expect, "a": {NORM: a}, "b": {NORM: b}, **kw}


def _grid_store(root, write_run, pos_values):
    for norm, base in (("post", 1.9), ("pre", 1.6)):
        for pos in pos_values:
            for seed in range(3):
                final = base + 0.02 * (seed - 1) + 0.003 * seed * (pos == "rope")
                write_run(root, "g", {NORM: norm, POS: pos}, seed, "completed", final)
    return root


def test_a_grown_grid_leaves_the_claims_p_values_unchanged(tmp_path, write_run):
    claims = [
        _claim("pre-wins", "pre", "post", where={POS: "rope"}),
        _claim("pre-learned", "pre", "post", where={POS: "learned"}),
    ]
    small = _grid_store(tmp_path / "small", write_run, ["learned", "rope"])
    big = _grid_store(tmp_path / "big", write_run, ["learned", "rope", "alibi"])  # one column more
    grids = {"small": ["learned", "rope"], "big": ["learned", "rope", "alibi"]}
    out = {}
    for name, store in (("small", small), ("big", big)):
        spec = _spec(tmp_path / name / "g.yaml", {NORM: ["post", "pre"], POS: grids[name]}, claims)
        comps, checks = analyse(read_study(store, "g", spec))
        out[name] = comps, {c.claim.id: c.comparison for c in checks}
    (small_comps, small_claims), (big_comps, big_claims) = out["small"], out["big"]
    assert len(big_comps) > len(small_comps)  # the exploratory family grew...
    for cid, c in small_claims.items():  # ...the claims' did not
        assert big_claims[cid].p_adj == c.p_adj and big_claims[cid].family == c.family == 2


def test_a_claim_reversed_from_an_axis_comparison_counts_once(tmp_path, write_run):
    # architecture-like: one claim, written as the reverse of the only axis comparison
    store = tmp_path / "runs"
    for norm, base in (("post", 1.9), ("pre", 1.6)):
        for seed in range(3):
            final = base + (0.01 * seed**2 if norm == "pre" else 0.01 * seed)
            write_run(store, "arch", {NORM: norm}, seed, "completed", final)
    spec = _spec(tmp_path / "arch.yaml", {NORM: ["post", "pre"]}, [_claim("x", "pre", "post")])
    comps, (check,) = analyse(read_study(store, "arch", spec))
    assert comps[0].label_a == "post" and check.comparison.label_a.endswith("pre")
    assert check.comparison.family == 1 and check.comparison.p_adj == check.comparison.p
    # two claims that are one test in opposite directions: still one test
    twin = [ClaimCheck(Claim("a", "a", "better")), ClaimCheck(Claim("b", "b", "better"))]
    c = compare(Arm([1.5, 1.6, 1.55], seeds=[0, 1, 2]), Arm([1.8, 1.9, 1.85], seeds=[0, 1, 2]))
    twin[0].comparison = c.__class__(**{**c.__dict__, "key": ("m", ("r1",), ("r2",))})
    twin[1].comparison = c.__class__(**{**c.__dict__, "key": ("m", ("r2",), ("r1",))})
    confirmatory_family(twin)
    assert [t.comparison.family for t in twin] == [1, 1]


def _equiv_outcome(a, b, margin=0.01):
    check = ClaimCheck(Claim("e", "e", "equivalent", margin=margin))
    check.comparison = compare(
        Arm(a, seeds=range(len(a))), Arm(b, seeds=range(len(b))), margin=margin
    )
    confirmatory_family([check])
    decide_claim(check, ALPHA)
    return check


def test_equivalence_outcomes_with_a_margin():
    base = [1.50, 1.51, 1.49, 1.505, 1.495, 1.50]
    tiny = [0.0010, 0.0012, 0.0011, 0.0009, 0.0010, 0.0011]  # a real 0.001: inside ±0.01
    ch = _equiv_outcome([x + d for x, d in zip(base, tiny, strict=True)], base)
    assert ch.outcome == WITHIN_MARGIN and "inside ±0.01" in ch.why
    big = [0.05, 0.051, 0.049, 0.05, 0.052, 0.048]  # 0.05 apart: beyond ±0.01
    ch = _equiv_outcome([x + d for x, d in zip(base, big, strict=True)], base)
    assert ch.outcome == CONTRADICTED and ch.why.startswith("different")
    noisy = [0.001, -0.002, 0.0015, -0.001, 0.0005, 0.0]  # centred on 0, sd 0.0013
    ch = _equiv_outcome([x + d for x, d in zip(base, noisy, strict=True)], base)
    assert ch.outcome == REPRODUCES and ch.why.startswith("equivalent")
    wide = [0.02, -0.03, 0.01, -0.02, 0.03, -0.01]
    ch = _equiv_outcome([x + d for x, d in zip(base, wide, strict=True)], base)
    assert ch.outcome == INCONCLUSIVE and ch.seeds_needed is not None


def test_seeds_needed_is_never_fewer_than_the_seeds_that_failed():
    # a one-sample exponent: seeds, not seeds per arm; at least n + 1
    alphas = [0.1, 0.9, 0.4]
    c = compare(Arm(alphas, seeds=[0, 1, 2]), Arm([0.5] * 3, seeds=[0, 1, 2]), margin=0.1)
    need = claim_seeds_needed(c, Claim("x", "x", "better", metric="lr_exponent", value=0.5))
    assert need.unit.startswith("seeds (one fitted exponent") and "per arm" not in need.unit
    c = compare(Arm([1.0, 1.3, 1.1], seeds=[0, 1, 2]), Arm([1.25, 1.2, 1.5], seeds=[0, 1, 2]))
    big = c.__class__(**{**c.__dict__, "family": 1, "diff": -0.5})  # a huge assumed effect
    need = claim_seeds_needed(big, Claim("y", "y", "better"))
    assert need.n >= 4 and need.unit == "seeds per arm (paired by seed)"
    # the true difference on the margin: equivalence is never shown
    on = c.__class__(**{**c.__dict__, "diff": 0.01, "margin": 0.01})
    need = claim_seeds_needed(on, Claim("z", "z", "equivalent"))
    assert need.n is None and "not reachable" in need.text()


def test_registration_proven_from_git_and_every_attempt_listed(
    tmp_path, write_run, git, mark_confirm
):
    store, t0 = tmp_path / "runs", 1_000_000_000
    for norm, base in (("post", 1.9), ("pre", 1.6)):
        for seed in range(9):
            write_run(store, "reg", {NORM: norm}, seed, "completed", base + 0.01 * (seed % 3))
    spec = _spec(tmp_path / "reg.yaml", {NORM: ["post", "pre"]}, [_claim("early", "pre", "post")])
    data = read_study(store, "reg", spec)
    design = {"kind": "fixed", "seeds": [6, 7, 8]}
    record = build_registration("reg", None, data.claims, 0.01, design)
    write_registration(registration_path(spec), record)
    git(tmp_path, "init", "-q")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "before the registration", when=t0 - 60)
    before = git(tmp_path, "rev-parse", "HEAD")
    git(tmp_path, "add", "registrations/reg.yaml")
    git(tmp_path, "commit", "-qm", "register reg", when=t0)
    commit = git(tmp_path, "rev-parse", "HEAD")
    mark_confirm(store, "reg", {3, 4, 5}, "before registration files", started=t0 - 86400)
    mark_confirm(store, "reg", {6, 7, 8}, commit, started=t0 + 7200, commit=commit)
    (tmp_path / "r" / "reg" / "history").mkdir(parents=True)
    old = "seed,confirm,final_val_loss\n0,,1.6\n3,True,1.61\n4,True,1.62\n"
    (tmp_path / "r" / "reg" / "history" / "attempt-1.csv").write_text(old)

    _, (check,) = analyse(read_study(store, "reg", spec))
    assert check.confirmation and sorted(check.pool["seed"]) == [6, 6, 7, 7, 8, 8]
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    md = (path.parent / "provenance.md").read_text()
    claim = next(line for line in md.splitlines() if line.startswith("- **early**"))
    assert f"*[registered {commit[:7]}, order proven by git](provenance.md#claim-early)*" in (
        path.read_text()
    )
    assert f"registered in {commit[:7]}; order proven by git: {commit[:7]} is an ancestor" in claim
    assert "registered 2001-09-09 01:46 UTC, 2.0 h before the first confirmation run" in claim
    audit = md.split("## Registration and confirmation attempts")[1]
    assert f"{commit[:7]} on 2001-09-09 01:46 UTC: register reg — fixed: 3 seeds per arm" in audit
    assert "under before registration files: 6 runs, seeds 3, 4, 5" in audit
    assert f"under {commit[:7]}: 6 runs, seeds 6, 7, 8" in audit
    assert "history/attempt-1.csv): 3 runs, 2 of them confirmation runs (seeds 3, 4)" in audit
    assert (path.parent / "history" / "attempt-1.csv").read_text() == old  # kept on rebuild
    assert "started" in pd.read_csv(path.parent / "results.csv")
    # claims.csv and the reports' claims index say what the report says
    (row,) = pd.read_csv(path.parent / "claims.csv").to_dict("records")
    assert row["confirmatory"] is True and row["registration"] in claim
    assert f"→ **{check.outcome}**" in claim and f": {row['numbers']}." in claim
    index = (tmp_path / "r" / "claims.md").read_text()
    assert "| [reg](reg/report.md) | 1 |" in index and "| 1 of 1 |" in index
    assert f"- **early** (confirmatory): {check.claim.text} → **{check.outcome}**" in index

    # ran from the commit before the registration: git disproves the order, whatever the clock
    mark_confirm(store, "reg", {6, 7, 8}, commit, started=t0 - 60, commit=before)
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    md = (path.parent / "provenance.md").read_text()
    assert f"{commit[:7]} is NOT an ancestor of {before[:7]}" in md and "(exploratory)" in md
    assert "1 min AFTER the first confirmation run" in md  # the clock, as a second line
    tag = "*[exploratory: git does not prove the order: "  # the Answer's tag says why, briefly
    assert tag in path.read_text() and "order proven by git" not in path.read_text()
    index = (tmp_path / "r" / "claims.md").read_text()
    assert "| 0 of 1 |" in index and "- **early** (exploratory)" in index


def test_looks_in_the_report(tmp_path, write_run, mark_confirm):
    store = tmp_path / "runs"
    for norm, base in (("post", 1.9), ("pre", 1.6)):
        for seed in range(6):
            write_run(store, "reg", {NORM: norm}, seed, "completed", base + 0.01 * (seed % 3))
    mark_confirm(store, "reg", {3, 4, 5})
    claims = [_claim("early", "pre", "post"), _claim("late", "post", "pre", expect="worse")]
    spec = _spec(tmp_path / "reg.yaml", {NORM: ["post", "pre"]}, claims)
    looks = [
        {
            "look": 1,
            "seeds": 3,
            "info_fraction": 0.5,
            "alpha_spent": 0.0056,
            "nominal_alpha": 0.0056,
            "decided": [],
        },
        {
            "look": 2,
            "seeds": 6,
            "info_fraction": 1.0,
            "alpha_spent": 0.05,
            "nominal_alpha": 0.0444,
            "decided": ["early"],
        },
    ]
    log = {
        "rounds": [],
        "design": {"max_looks": 2, "alpha": 0.05, "spending": "obrien-fleming"},
        "looks": looks,
    }
    (store / "reg" / "until_decided.json").write_text(json.dumps(log))
    _, checks = analyse(read_study(store, "reg", spec))
    assert all(ch.confirmation and ch.comparison.n_a == 3 for ch in checks)
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    prov = (path.parent / "provenance.md").read_text()
    section = prov.split("## Claims in full")[1].split("\n## ")[0]
    early, late = (line for line in section.splitlines() if line.startswith("- **"))
    assert "decided on 3 confirmation seed(s) only" in early
    assert "confirmation run before registration files existed: the order cannot be" in late
    assert "under before registration files: 6 runs, seeds 3, 4, 5" in prov
    assert "at most 2 looks, overall α = 0.05, obrien-fleming alpha spending" in section
    assert (
        "- look 2: 6 seeds (information fraction 1); alpha spent so far 0.05, nominal " in section
    )
    assert "decided: early" in section


@pytest.mark.parametrize(
    ("order", "test", "why"),
    [
        ("rows", "Welch t", STREAMS_DIFFER),
        ("tokens", "paired t", PAIRED),
        ("random", "paired t", PAIRED),
    ],
)
def test_batch_sizes_pair_by_seed_only_when_they_share_the_token_stream(
    tmp_path, write_run, order, test, why
):
    """Under ``data.order: rows`` a seed's token order changes with the batch size, so batch 8
    vs 64 is Welch; under ``tokens`` both see one stream per seed and the test is paired. The
    report says which and why."""
    store, bs = tmp_path / "runs", "data.batch_size"
    for b, base in ((8, 1.8), (64, 1.9)):
        for seed in range(3):
            axes = {bs: b, "data.order": order}
            final = base + 0.03 * seed + 0.004 * seed**2 * (b == 64)
            write_run(store, "pair", axes, seed, "completed", final)
    spec = tmp_path / "pair.yaml"
    spec.write_text(yaml.safe_dump({"name": "pair", "grid": {bs: [8, 64]}, "seeds": [0, 1, 2]}))
    (comp,), _ = analyse(read_study(store, "pair", spec))
    assert (comp.test, comp.pairing) == (test, why)
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    assert f"**Pairing.** 1 {why}." in (path.parent / "provenance.md").read_text()


def test_a_claim_decided_at_a_look_is_reported_on_that_looks_seeds(
    tmp_path, write_run, mark_confirm
):
    """Look 3 added seeds to the open claim's arms only, one of which the decided claim shares;
    the claim decided at look 2 keeps its 6 paired seeds and look 2's level, not a Welch test
    over 9 vs 6 seeds (issue 22, item 3)."""
    store = tmp_path / "runs"
    for pos in ("learned", "rope"):
        for norm, base in (("post", 1.9), ("pre", 1.6)):
            for seed in range(3, 12 if norm == "pre" else 9):  # look 3 grew the pre arms only
                final = base + 0.01 * (seed % 3) + 0.001 * seed * (2 + (pos == "rope"))
                write_run(store, "seq", {NORM: norm, POS: pos}, seed, "completed", final)
    mark_confirm(store, "seq", set(range(3, 12)))
    tie = _claim("tie", "pre", "pre", expect="equivalent")
    tie["a"][POS], tie["b"][POS] = "learned", "rope"  # shares big's pre@learned arm
    claims = [_claim("big", "pre", "post", where={POS: "learned"}), tie]
    spec = tmp_path / "seq.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "seq",
                "grid": {NORM: ["post", "pre"], POS: ["learned", "rope"]},
                "seeds": [0, 1, 2],
                "claims": claims,
            }
        )
    )
    levels = [0.0007, 0.0157, 0.0336]
    looks = [
        {
            "look": k + 1,
            "seeds": 3 * (k + 1),
            "seed_set": list(range(3, 6 + 3 * k)),
            "info_fraction": (k + 1) / 3,
            "alpha_spent": 0.0,
            "nominal_alpha": levels[k],
            "decided": ["big"] if k == 1 else [],
        }
        for k in range(3)
    ]
    log = {"rounds": [], "design": {"max_looks": 3, "alpha": 0.05}, "looks": looks}
    (store / "seq" / "until_decided.json").write_text(json.dumps(log))
    _, checks = analyse(read_study(store, "seq", spec))
    big, tie = checks
    assert big.look["look"] == 2 and big.comparison.paired and big.comparison.n_a == 6
    # decided by the t-test at look 2's nominal level; 6 seeds' exact floor (2/64) is above it
    assert big.t_outcome == "reproduces" and big.outcome == "reproduces by t-test only"
    assert tie.look["look"] == 3 and tie.comparison.n_a == tie.comparison.n_b == 9
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    assert "decided at look 2 of the sequential design on its 6 confirmation seeds" in (
        (path.parent / "provenance.md").read_text()
    )


@pytest.mark.parametrize(
    ("device", "where"), [("cpu", "CPU scale"), ("NVIDIA H100 80GB", "GPU scale")]
)
def test_the_claims_section_states_the_scale_computed_from_the_runs(
    tmp_path, write_run, device, where
):
    resolve_dataset("tinyshakespeare")  # the data reuse is computed where the data is
    store = tmp_path / "runs"
    for norm, base in (("post", 1.9), ("pre", 1.6)):
        for seed in range(3):
            write_run(store, "sc", {NORM: norm}, seed, "completed", base + 0.01 * seed)
    for run in RunStore(store).runs("sc"):
        dtypes = {"matmul": "float32", "loss": "float32"}
        run.write_summary(
            {**run.read_summary(), "environment": {"device": device}, "compute_dtypes": dtypes}
        )
    margin = {"margin": 0.05, "margin_source": "a stated tolerance"}
    claims = [_claim("same", "pre", "post", expect="equivalent", **margin)]
    spec = _spec(tmp_path / "sc.yaml", {NORM: ["post", "pre"]}, claims)
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    section = path.read_text().split("## Question")[1]
    cfg = yaml.safe_load(next(RunStore(store).runs("sc")).path.joinpath("run.yaml").read_text())
    b, t = cfg["config"]["data"]["batch_size"], cfg["config"]["data"]["seq_len"]
    # data reuse, by hand: b rows of n // b tokens, ceil((n // b - t) / t) windows of t per row
    n = token_splits(DataConfig.model_validate(cfg["config"]["data"])).tokens["train"].numel()
    distinct = b * math.ceil((n // b - t) / t)
    assert (
        f"holds at this {where}: 51,000 parameters, 100 steps of {b} x {t} tokens "
        f"({100 * b * t:,} training tokens per run), AdamW, peak LR 0.001, 32-true "
        f"(matmul fp32, loss fp32, measured); data: {100 * b / distinct:.2f} windows drawn per "
        f"distinct window ({100 * b:,} of {distinct:,}), {100 * b * t / n:.1f} passes over the "
        f"{n:,} training tokens." in section
    )
    assert "unless a claim sets its own" not in section  # every claim states its margin
    (row,) = pd.read_csv(path.parent / "claims.csv").to_dict("records")
    assert row["scale"].startswith(f"{where}: 51,000 parameters")


def test_a_withdrawn_attempts_unfinished_runs_are_named_not_counted_as_work_left(
    tmp_path, write_run, mark_confirm
):
    store = tmp_path / "runs"
    for norm, base in (("post", 1.9), ("pre", 1.6)):
        for seed in range(7):
            status = "running" if seed in (3, 4) else "completed"
            write_run(store, "wd", {NORM: norm}, seed, status, base + 0.01 * seed)
    mark_confirm(store, "wd", {3, 4}, "aaaaaaa1", started=1_000_000_000)
    mark_confirm(store, "wd", {5, 6}, "bbbbbbb2", started=1_000_086_400)
    spec = _spec(tmp_path / "wd.yaml", {NORM: ["post", "pre"]}, [_claim("c", "pre", "post")])
    data = read_study(store, "wd", spec)
    assert progress_line(data) is None  # 10 of 10 finished once the withdrawn 4 are set aside
    assert withdrawn_note(data).startswith("4 unfinished confirmation run(s) of an earlier ")
    assert "(under aaaaaaa)" in withdrawn_note(data)
    assert attempt_items(data)[:2] == [
        "under aaaaaaa1: 4 runs (0 finished, 4 not), seeds 3, 4, first started 2001-09-09 "
        "01:46 UTC",
        "under bbbbbbb2: 4 runs, seeds 5, 6, first started 2001-09-10 01:46 UTC",
    ]
    # were the later attempt the unfinished one, it would be work left
    mark_confirm(store, "wd", {3, 4}, "aaaaaaa1", started=1_000_172_800)
    data = read_study(store, "wd", spec)
    assert progress_line(data).startswith("PARTIAL: 10 of 14 runs finished; 4 interrupted")
    assert withdrawn_note(data) is None
