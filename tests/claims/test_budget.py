"""A registration the test can decide, and one α budget per claim across its attempts: the
exact tests' floors against hand-computed values and the tests themselves, register / pilot /
plan agreeing on the seeds, and attempts labelled by what they spend."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from ablate.claims.outcomes import analyse, pilot
from ablate.claims.power import claims_family, decidable_n
from ablate.claims.registration import (
    Spending,
    build_registration,
    parse_spending,
    registration_path,
    spending_option,
    write_registration,
)
from ablate.claims.spec import Claim
from ablate.claims.stats import permutation_p, sign_flip_p, sign_flip_tost
from ablate.cli import app
from ablate.config import ConfigError
from ablate.report.claims_section import claims_frame
from ablate.results import read_study

NORM, POS = "model.norm_placement", "model.pos_encoding"
BETTER = Claim("b", "b", "better", a={NORM: "pre"}, b={NORM: "post"})


# --- the floor: the fewest seeds whose exact test can reach the level -------------------------


def test_floors_are_the_hand_computed_smallest_p_of_each_exact_test():
    # two-sided sign-flip: smallest p 2/2^n; five seeds give 0.0625, above even α=0.05
    assert decidable_n(BETTER, 1, 0.05).smallest_p(5) == 0.0625
    assert decidable_n(BETTER, 1, 0.05).n == 6  # 2/64 = 0.031
    # five claims at α=0.05: Holm's first step 0.01 needs 2/2^n < 0.01, n = 8 (2/256 = 0.0078;
    # 7 seeds give 2/128 = 0.0156); the sign-flip test itself agrees at both counts
    five = decidable_n(BETTER, 5, 0.05)
    assert (five.n, five.level) == (8, 0.01)
    assert sign_flip_p(np.arange(1, 9)) == 2 / 256 < 0.01 <= sign_flip_p(np.arange(1, 8))
    # an attempt at α/2 (halving): 0.005 needs 2/2^n < 0.005, n = 9 (2/512 = 0.0039)
    assert decidable_n(BETTER, 5, 0.025).n == 9
    # TOST: the larger of two one-sided p, floor 1/2^n: three claims, 0.0167 -> n = 6 (1/64)
    eq = Claim("e", "e", "equivalent", a={NORM: "pre"}, b={NORM: "post"})
    assert decidable_n(eq, 3, 0.05).n == 6
    tiny = [0.001, -0.002, 0.0, 0.001, 0.002, -0.001]
    assert sign_flip_tost(tiny, 0.01) == 1 / 64 < 0.05 / 3 <= sign_flip_tost(tiny[:5], 0.01)
    # unpaired arms: permutation, 2/C(2n, n); at 0.01 n = 5 (2/252 = 0.0079; 4 give 2/70)
    perm = decidable_n(BETTER, 5, 0.05, unpaired=True)
    assert perm.n == 5 and perm.test == "permutation"
    a, b = np.arange(5.0), np.arange(5.0) + 10
    assert permutation_p(a, b) == pytest.approx(2 / math.comb(10, 5))
    assert permutation_p(a[:4], b[:4]) == pytest.approx(2 / 70) and 2 / 70 > 0.01
    # against three published values: 2/C(n + 3, n) < 0.05 first at n = 5 (2/56; 4 give 2/35)
    pub = Claim("p", "p", "better", a={NORM: "pre"}, external=(9.0, 9.1, 9.2))
    assert decidable_n(pub, 1, 0.05).n == 5
    assert permutation_p(a, [9.0, 9.1, 9.2]) == pytest.approx(2 / 56)
    assert permutation_p(a[:4], [9.0, 9.1, 9.2]) == pytest.approx(2 / 35) and 2 / 35 > 0.05
    # a count of diverged runs has no exact test to floor it
    assert decidable_n(Claim("d", "d", "diverges", a={NORM: "post"}), 5, 0.05).n == 2
    assert "cannot go below α/5=0.01 with fewer than 8 seeds" in five.text()
    # a trend over three rungs is decided at each of its two steps too (Holm over them): in a
    # family of 2 a step's sign-flip test must reach 0.05/2/2 = 0.0125: 2/2^8 = 0.0078, while
    # 7 seeds give 2/2^7 = 0.016; the slope alone would need only 7 (0.016 < 0.025)
    trend = Claim("t", "t", "grows", a={NORM: "post"}, b={NORM: "pre"})
    assert decidable_n(trend, 2, 0.05).n == 7
    assert decidable_n(trend, 2, 0.05, steps=2).n == 8
    assert decidable_n(BETTER, 2, 0.05, steps=2).n == 7  # steps are a trend's only


def test_a_claim_and_its_reverse_are_one_test_of_the_family():
    rev = Claim("r", "r", "worse", a={NORM: "post"}, b={NORM: "pre"})
    other = Claim("o", "o", "better", a={POS: "rope"}, b={POS: "learned"})
    assert claims_family([BETTER, rev, other]) == 2


# --- the budget's shares ----------------------------------------------------------------------


def test_spending_shares_never_exceed_alpha():
    once, three, halving = Spending(), Spending("equal", 3), Spending("halving")
    assert [once.share(k) for k in (1, 2)] == [0.05, 0.0]
    assert [three.share(k) for k in (1, 3, 4)] == pytest.approx([0.05 / 3, 0.05 / 3, 0.0])
    assert [halving.share(k) for k in (1, 2, 3)] == [0.025, 0.0125, 0.00625]
    assert sum(halving.share(k) for k in range(1, 30)) < 0.05  # 0.05 (1 - 2^-29)
    assert spending_option("1") == once and spending_option("3") == three
    assert spending_option("halving") == halving
    for bad in ("0", "two"):
        with pytest.raises(ConfigError, match="--attempts: must be a whole number"):
            spending_option(bad)
    with pytest.raises(ConfigError, match="attempts.max_attempts"):
        parse_spending({"rule": "equal"}, "r.yaml")
    assert parse_spending(halving.record()) == halving


# --- register, pilot and plan count the same seeds -----------------------------------------

FIVE = [
    {"id": f"pre-{p}", "text": f"Pre-LN beats Post-LN with {p}", "expect": "better"}
    | {"a": {NORM: "pre"}, "b": {NORM: "post"}, "where": {POS: p}}
    for p in ("learned", "rope", "alibi")
] + [
    {"id": f"{p}-post", "text": f"{p} beats learned with Post-LN", "expect": "better"}
    | {"a": {POS: p}, "b": {POS: "learned"}, "where": {NORM: "post"}}
    for p in ("rope", "alibi")
]


def _study(tmp_path, claims, name="five"):
    grid = {NORM: ["post", "pre"], POS: ["learned", "rope", "alibi"]}
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump({"name": name, "grid": grid, "seeds": [0, 1, 2], "claims": claims})
    )
    return path


def _pilot_store(store, write_run, name="five"):
    for norm, base in (("post", 1.9), ("pre", 1.6)):
        for i, pos in enumerate(("learned", "rope", "alibi")):
            for seed in range(3):
                noise = np.random.default_rng([seed, i, norm == "pre"]).normal(0, 0.01)
                final = base - 0.05 * i + 0.02 * seed + noise
                write_run(store, name, {NORM: norm, POS: pos}, seed, "completed", final)
    return store


def test_register_refuses_a_design_its_exact_tests_cannot_decide(tmp_path, write_run):
    store = _pilot_store(tmp_path / "runs", write_run)
    study = _study(tmp_path, FIVE)
    reg = registration_path(study)
    cli = CliRunner()
    res = cli.invoke(app, ["register", str(study), "--seeds", "3", "--store", str(store)])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert "3 seeds per arm cannot decide claim pre-learned: it needs at least 8" in res.output
    assert not reg.exists()
    # the plan prints the same n for every claim, and the pilot's need is never below it
    res = cli.invoke(app, ["plan", str(study), "--store", str(store), "--no-estimate"])
    assert res.exit_code == 0, res.output
    for c in FIVE:
        assert f"{c['id']}: attempt 1 at α=0.05, at least 8 seeds" in res.output
    _, needs = pilot(read_study(store, "five", study))
    assert {cid: need.floor.n for cid, need in needs.items()} == {c["id"]: 8 for c in FIVE}
    assert all(need.n >= 8 for need in needs.values())
    # eight seeds are enough; an exploratory registration takes any
    res = cli.invoke(app, ["register", str(study), "--seeds", "8", "--store", str(store)])
    assert res.exit_code == 0, res.output
    record = yaml.safe_load(reg.read_text())
    assert record["attempts"] == {"rule": "once"} and len(record["design"]["seeds"]) == 8
    assert {(c["attempt"], c["alpha"]) for c in record["claims"]} == {(1, 0.05)}
    assert record["claims"][0]["budget"] == "one attempt at α=0.05 (fixed when first registered)"
    args = ["register", str(study), "--seeds", "3", "--exploratory", "--store", str(store)]
    assert cli.invoke(app, args).exit_code == 0
    record = yaml.safe_load(reg.read_text())
    assert record["exploratory"] is True and "alpha" not in record["claims"][0]
    # halving: the first attempt spends α/2, so it needs 9 (2/2^9 < 0.005)
    args = ["register", str(study), "--seeds", "8", "--attempts", "halving", "--store", str(store)]
    res = cli.invoke(app, args)
    assert res.exit_code == 2 and "it needs at least 9" in res.output


# --- attempts under one budget ------------------------------------------------------------


def _attempts_repo(tmp_path, write_run, mark_confirm, git, rules):
    """A study with one claim (pre beats post by ~0.3, every seed the same way), registered
    once per entry of ``rules`` (its ``attempts:``; None: the format before budgets), each
    registration's seven fresh seeds trained as its confirmation runs, in order."""
    store, t0 = tmp_path / "runs", 1_000_000_000
    claim = {"id": "pre", "text": "Pre-LN beats Post-LN", "expect": "better"}
    claim |= {"a": {NORM: "pre"}, "b": {NORM: "post"}}
    spec = tmp_path / "att.yaml"
    grid = {NORM: ["post", "pre"]}
    spec.write_text(
        yaml.safe_dump({"name": "att", "grid": grid, "seeds": [0, 1, 2], "claims": [claim]})
    )
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "att.yaml")
    git(tmp_path, "commit", "-qm", "the study", when=t0 - 100)
    seeds = list(range(3 + 7 * len(rules)))
    for norm, base in (("post", 1.9), ("pre", 1.6)):
        for seed in seeds:
            write_run(store, "att", {NORM: norm}, seed, "completed", base + 0.01 * (seed % 4))
    data = read_study(store, "att", spec)
    commits = []
    for i, rule in enumerate(rules):
        mine = seeds[3 + 7 * i : 10 + 7 * i]
        record = build_registration(
            "att", None, data.claims, 0.01, {"kind": "fixed", "seeds": mine}
        )
        if rule is None:
            del record["attempts"]
        else:
            record["attempts"] = rule
        write_registration(registration_path(spec), record)
        git(tmp_path, "add", "registrations/att.yaml")
        git(tmp_path, "commit", "-qm", f"register {i}", when=t0 + 1000 * i)
        commits.append(git(tmp_path, "rev-parse", "HEAD"))
        mark_confirm(
            store, "att", set(mine), commits[-1], started=t0 + 1000 * i + 60, commit=commits[-1]
        )
    return store, spec, commits


def _row(store, spec) -> dict:
    """The claims table's row of the study's one claim, as the report writes claims.csv."""
    data = read_study(store, "att", spec)
    _, checks = analyse(data)
    (row,) = claims_frame(data, checks, "nats").to_dict("records")
    return row


def test_each_attempt_spends_its_registered_share_and_is_decided_at_it(
    tmp_path, write_run, mark_confirm, git
):
    # the first registration fixes halving; the second's own rule changes nothing for this claim
    rules = [{"rule": "halving"}, {"rule": "once"}]
    store, spec, commits = _attempts_repo(tmp_path, write_run, mark_confirm, git, rules)
    _, (check,) = analyse(read_study(store, "att", spec))
    h = check.history
    assert [s.alpha for s in h.shares] == [0.025, 0.0125]
    assert h.deciding == 1 and h.deciding_share().confirms
    # seven seeds, every difference one way: exact p = 2/2^7 = 0.0156, below α/2, not α/4
    assert check.comparison.p_flip == pytest.approx(2 / 128)
    assert check.outcome == "reproduces by t-test only"
    assert h.earlier[0].startswith("reproduces (")  # the first attempt, at its α/2
    text = h.attempt_text()
    assert f"fixed by its first registration ({commits[0][:7]})" in text
    assert "this attempt: α=0.0125 (share 2 of the claim's budget)" in text
    assert f"under {commits[0][:7]}: 14 runs, seeds 3, 4, 5, 6, 7, 8, 9: α=0.025" in text
    row = _row(store, spec)
    assert row["confirmatory"] is True and row["alpha"] == "0.0125"
    assert row["attempt"] == "2 of 2" and "α/2^k" in row["alpha budget"]
    assert "α=0.025 (share 1 of the claim's budget) → reproduces" in row["attempts"]
    assert "not shared" not in row["decided on"]


def test_an_attempt_without_a_share_is_exploratory(tmp_path, write_run, mark_confirm, git):
    # registrations from before budgets: the first spent α; the second has no share
    store, spec, commits = _attempts_repo(tmp_path, write_run, mark_confirm, git, [None, None])
    _, (check,) = analyse(read_study(store, "att", spec))
    first, second = check.history.shares
    assert first.alpha == 0.05 and second.alpha is None
    assert second.role.startswith("exploratory: no α share left (one attempt at α=0.05")
    assert f"spent α=0.05 by the attempt under {commits[0][:7]}" in second.role
    row = _row(store, spec)
    assert row["confirmatory"] is False and row["alpha"] == ""
    assert "from before α budgets" in row["alpha budget"]


def test_a_withdrawn_attempt_spends_nothing_and_a_text_changed_after_data_is_a_new_claim(
    tmp_path, write_run, mark_confirm, git
):
    store, spec, commits = _attempts_repo(tmp_path, write_run, mark_confirm, git, [None, None])
    # the first design never finished: all but one of its post-LN runs are lost
    runs = sorted((store / "att").iterdir())
    for d in runs:
        meta = yaml.safe_load((d / "run.yaml").read_text())["meta"]
        if (
            meta.get("registration") == commits[0]
            and meta["variant"] == "post"
            and meta["seed"] > 3
        ):
            summary = json.loads((d / "summary.json").read_text())
            (d / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    _, (check,) = analyse(read_study(store, "att", spec))
    first, second = check.history.shares
    assert (
        first.alpha is None and "withdrawn before its design finished (8 of 14 runs)" in first.role
    )
    assert second.alpha == 0.05 and check.history.deciding_share().confirms
    # the claim's text edited after the data it was decided on: a new claim, exploratory
    text = spec.read_text().replace("Pre-LN beats Post-LN", "Pre-LN beats Post-LN by far")
    spec.write_text(text)
    git(tmp_path, "commit", "-qam", "reword", when=1_000_009_000)
    row = _row(store, spec)
    assert row["confirmatory"] is False
    assert "exploratory: a new claim: its text changed after the data" in row["registration"]
    assert "changed: text in" in row["registration"]
