"""What a reviewer checks beyond the numbers: the exact sign-flip test beside the t-test, the
order proven by git ancestry, every attempt counted, margins against their history and against
the gap a claim quotes, and the seeds a design needs (tests/claims/test_budget.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import permutation_test

from ablate.claims.checks import ClaimCheck, confirmatory_family, decide_claim
from ablate.claims.comparisons import Arm, compare
from ablate.claims.history import (
    CLOSER,
    history_attempts,
    margin_gap_problem,
    margin_history,
    order_proof,
    quoted_gap,
)
from ablate.claims.power import decidable_n
from ablate.claims.spec import Claim
from ablate.claims.stats import sign_flip_floor, sign_flip_p, sign_flip_tost
from ablate.study.load import load_study

ROOT = Path(__file__).resolve().parents[2]


def test_sign_flip_matches_scipy_and_its_floor():
    d = np.array([0.3, -0.1, 0.5, 0.2, 0.9, 0.4, 0.05])
    ref = permutation_test(
        (d,), lambda x, axis: x.mean(axis=axis), permutation_type="samples", n_resamples=10**6
    )
    assert sign_flip_p(d) == pytest.approx(ref.pvalue)
    # five positive differences: the smallest two-sided p five seeds can give
    assert sign_flip_p([1, 2, 3, 4, 5]) == sign_flip_floor(5) == 0.0625
    assert sign_flip_p([1, 2, 3, 4, 5], alternative="greater") == 1 / 32
    assert sign_flip_tost([0.001, -0.002, 0.0, 0.001, 0.002, -0.001], 0.01) == 1 / 64


def test_a_verdict_is_plain_only_where_the_exact_test_reaches_it_too():
    # five seeds, every difference the same way: the paired t-test is far below 0.05, the
    # exact sign-flip test cannot go below 2/2^5 = 0.0625
    a, b = [1.0, 1.2, 0.9, 1.5, 1.1], [0.2, 0.5, 0.1, 0.9, 0.3]
    claim = Claim(id="x", text="a is worse", expect="worse")
    check = ClaimCheck(claim, compare(Arm(a, seeds=range(5)), Arm(b, seeds=range(5))))
    confirmatory_family([check])
    decide_claim(check, 0.05)
    c = check.comparison
    assert c.paired and c.p_flip == 0.0625 and c.p < 0.01
    assert (check.t_outcome, check.exact_outcome) == ("reproduces", "inconclusive")
    assert check.outcome == "reproduces by t-test only"
    assert "5 seeds cannot go below p=0.062" in check.why
    # both tests decide at six seeds (2/2^6 = 0.031): the seeds needed say so
    assert decidable_n(claim, 1, 0.05).n == 6 and check.seeds_needed.n == 6
    six = ClaimCheck(claim, compare(Arm([*a, 1.3], seeds=range(6)), Arm([*b, 0.4], seeds=range(6))))
    confirmatory_family([six])
    decide_claim(six, 0.05)
    assert six.comparison.p_flip == pytest.approx(2 / 64) and six.outcome == "reproduces"
    assert six.seeds_needed is None
    welch = compare(a, b[:4])  # no pairs: no sign-flip test (a claim gets the permutation test)
    assert np.isnan(welch.p_flip)


def test_every_shipped_equivalence_claim_has_a_margin_at_least_the_quoted_gap_or_says_why():
    assert quoted_gap("18.7 vs 19.3 ppl") == pytest.approx(0.0316, abs=1e-4)
    assert quoted_gap("1.942 vs 1.944 log-ppl") == pytest.approx(0.002)
    seen = []
    for path in sorted((ROOT / "studies").glob("*.yaml")):
        study = load_study(path, check_data=False, check_device=False)
        for c in study.claims:
            if c.expect != "equivalent":
                continue
            m = c.margin if c.margin is not None else study.equivalence_margin
            assert margin_gap_problem(c, m) == "", (path.name, c.id)
            seen.append(c.id)
    assert "alibi-equals-sinusoidal-at-1x" in seen
    alibi = next(
        c
        for c in load_study(
            ROOT / "studies/positional_encoding.yaml", check_data=False, check_device=False
        ).claims
        if c.id == "alibi-equals-sinusoidal-at-1x"
    )
    assert CLOSER in alibi.text
    bare = replace(alibi, text="close (18.7 vs 19.3 ppl)")
    assert "narrower than the gap" in margin_gap_problem(bare, 0.01)
    assert margin_gap_problem(bare, 0.04) == ""


def _repo(tmp_path, git):
    repo = tmp_path / "repo"
    (repo / "studies/registrations").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "ablate").mkdir()
    (repo / "ablate/registration.py").write_text("# has changes not committed\n")
    return repo


def test_order_is_proven_by_git_ancestry_not_the_clock(tmp_path, git):
    repo = _repo(tmp_path, git)
    reg = repo / "studies/registrations/s.yaml"
    reg.write_text("claims: []\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "register", when=2_000_000_000)
    r = git(repo, "rev-parse", "HEAD")
    (repo / "x.txt").write_text("later\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "later", when=1_000_000_000)  # a clock running backwards
    later = git(repo, "rev-parse", "HEAD")
    runs = pd.DataFrame({"git_commit": [r, later], "git_dirty": [False, True]})
    proof = order_proof(reg, r, runs)
    assert proof.ok is True and proof.dirty == 1
    assert "is an ancestor of the commit of every one of the 2" in proof.text
    assert "1 of 2 ran from a DIRTY tree" in proof.text
    # the registration is not an ancestor of a run from before it
    git(repo, "checkout", "-q", "--orphan", "other")
    git(repo, "commit", "-qm", "elsewhere", when=2_100_000_000)
    other = git(repo, "rev-parse", "HEAD")
    bad = order_proof(reg, r, pd.DataFrame({"git_commit": [other], "git_dirty": [False]}))
    assert bad.ok is False and "NOT an ancestor" in bad.text
    unknown = pd.DataFrame({"git_commit": ["f" * 40], "git_dirty": [False]})
    assert order_proof(reg, r, unknown).ok is None
    assert "order not checkable here" in order_proof(reg, r, unknown).text
    outside = tmp_path / "nogit/registrations"
    outside.mkdir(parents=True)
    gone = order_proof(outside / "s.yaml", r, runs)
    assert gone.ok is None and "order not checkable here" in gone.text


def test_a_margin_change_is_found_against_the_first_parent(tmp_path, git):
    repo = _repo(tmp_path, git)
    study = repo / "studies/s.yaml"
    body = "claims:\n  - id: eq\n    expect: equivalent\n    margin: {}\n"
    study.write_text(body.format(0.01))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "first", when=1_000_000_000)
    study.write_text(body.format(0.03))
    git(repo, "commit", "-qam", "widen", when=1_000_000_100)
    study.write_text(body.format(0.03) + "# a comment\n")
    git(repo, "commit", "-qam", "comment", when=1_000_000_200)
    margins = margin_history(study, "eq")
    assert [m.margin for m in margins] == [0.01, 0.03]
    assert margins[1].time == 1_000_000_100


def test_archived_attempts_are_each_counted_in_the_order_git_recorded_them(tmp_path, git):
    repo = _repo(tmp_path, git)
    (repo / "f").write_text("x")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "rows", when=1_500_000_000)
    c = git(repo, "rev-parse", "HEAD")
    hist = repo / "history"
    hist.mkdir()
    row = {"seed": [8, 9], "status": ["completed"] * 2, "confirm": [1.0, 1.0]}
    pd.DataFrame(row | {"recorded_in": [c, c]}).to_csv(hist / "z-early.csv", index=False)
    pd.DataFrame(row | {"seed": [11, 12]}).to_csv(hist / "a-later.csv", index=False)
    attempts = history_attempts(hist, repo)
    assert [a.seeds for a in attempts] == [(8, 9), (11, 12)]


def test_reference_attempt_on_seeds_8_to_10_is_archived():
    df = pd.read_csv(ROOT / "reports/reference_nanogpt_cpu/history/seeds-8-10-714c481.csv")
    assert sorted(df.loc[df["confirm"] == 1, "seed"]) == [8, 9, 10]
    assert df["recorded_in"].str.startswith("714c481").all()


@pytest.mark.parametrize(
    ("n", "delta", "sd", "margin"), [(5, 0.004, 0.01, 0.03), (8, 0.0, 0.02, 0.03)]
)
def test_seeds_needed_power_equals_a_simulation_of_the_tests(n, delta, sd, margin):
    """The power behind "seeds needed" is computed exactly (noncentral t; TOST integrated over
    the sample SD); a Monte Carlo of the same tests on normal seed differences agrees."""
    import numpy as np
    from scipy import stats

    from ablate.claims.power import diff_power, tost_power

    rng = np.random.default_rng(0)
    d = rng.normal(delta, sd, size=(40_000, n))
    mean, se = d.mean(1), d.std(1, ddof=1) / np.sqrt(n)
    t = stats.t.isf(0.05, n - 1)
    tost = np.mean((mean - t * se > -margin) & (mean + t * se < margin))
    assert tost_power(n, delta, sd, margin) == pytest.approx(tost, abs=0.01)
    two_sided = np.mean(np.abs(mean / se) > stats.t.isf(0.025, n - 1))
    assert diff_power(n, delta, sd, 0.05) == pytest.approx(two_sided, abs=0.01)


def test_the_papers_numbers_are_data_the_line_holds_its_interval_against(tmp_path):
    from ablate.claims.paper import Paper, parse_paper
    from ablate.claims.spec import claim_fingerprint
    from ablate.claims.verdicts import paper_said, paper_text
    from ablate.config import ConfigError

    paper = parse_paper({"a": 18.66, "b": 19.34, "unit": "ppl"}, "claims[0].paper", tmp_path)
    assert paper.effect == pytest.approx(np.log(18.66) - np.log(19.34))  # -0.0358 nats
    claim = Claim("alibi-eq", "t", "equivalent", a={"pe": "alibi"}, b={"pe": "sin"}, paper=paper)
    assert claim_fingerprint(claim) == claim_fingerprint(replace(claim, paper=None))
    c = compare([0.0] * 2, [0.0] * 2)  # its numbers are set below
    check = ClaimCheck(claim, replace(c, ci_lo=-0.00726, ci_hi=0.00303))
    assert paper_text(check) == (
        "the paper's 0.0358-nat advantage of alibi (18.66 vs 19.34 ppl) is excluded at this "
        "scale (95% CI [-0.00726, 0.00303]: smaller here, possibly none)"
    )
    inside = ClaimCheck(claim, replace(c, ci_lo=-0.05, ci_hi=0.01))
    assert paper_text(inside).endswith("lies inside this 95% CI [-0.05, 0.01]")
    # what the paper says, with no run's number (claims.md's column across scales)
    assert paper_said(check) == "the paper's 0.0358-nat advantage of alibi (18.66 vs 19.34 ppl)"
    sgd = ClaimCheck(replace(claim, paper=Paper(optimizer="SGD", setting="ResNet-50")), c)
    assert paper_said(sgd) == "the paper: with SGD; ResNet-50"
    assert paper_said(ClaimCheck(replace(claim, paper=None), c)) == ""
    for raw, key in (
        ({"a": 18.66}, "claims[0].paper"),
        ({"a": 1, "b": 2, "unit": "bleu"}, "claims[0].paper.unit"),
        ({"table": 2}, "claims[0].paper.table"),
    ):
        with pytest.raises(ConfigError) as err:
            parse_paper(raw, "claims[0].paper", tmp_path)
        assert f": {key}: " in str(err.value) and "\n" not in str(err.value)


def test_a_rule_stated_for_another_optimizer_is_not_contradicted_here():
    from ablate.claims.paper import Paper

    # six seeds' fitted exponents, far from the linear rule's 1: both tests decide
    alphas = [-0.30, -0.25, -0.28, -0.22, -0.31, -0.27]
    sgd = Paper(optimizer="SGD", setting="ResNet-50 on ImageNet")
    claim = Claim("linear", "t", "equivalent", metric="lr_exponent", value=1.0, paper=sgd)
    comp = compare(Arm(alphas, seeds=range(6)), Arm([1.0] * 6, seeds=range(6)), margin=0.15)
    check = ClaimCheck(claim, comp)
    confirmatory_family([check])
    decide_claim(check, 0.05)
    assert check.t_outcome == check.exact_outcome == "contradicted"
    assert check.outcome == "not reproduced at this setting"
    assert "the paper states it for SGD (ResNet-50 on ImageNet)" in check.why
    adam = ClaimCheck(replace(claim, paper=Paper(optimizer="Adam")), comp)
    confirmatory_family([adam])
    decide_claim(adam, 0.05)
    assert adam.outcome == "contradicted"
