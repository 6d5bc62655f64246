"""--until-decided: a sequential design on the claims that spends alpha over planned looks."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess

import numpy as np
import pytest
import yaml
from scipy import stats

from ablate.claims.looks import look_seed_counts
from ablate.claims.outcomes import claim_outcomes
from ablate.claims.sequential import look_levels, obf_spent
from ablate.config import ConfigError
from ablate.execution.confirm import Choices, register_study
from ablate.execution.decide import run_until_decided as run_registered
from ablate.results import read_study
from ablate.store.rundir import DECISIONS_FILE as LOG

# these tests are about the design's mechanics; test_sequential_needs_its_registration below
# covers the registration it needs
run_until_decided = functools.partial(run_registered, unregistered=True)

GRID = {"model.activation": ["relu", "gelu"], "model.norm_placement": ["pre", "post"]}
OPEN = {  # stays inconclusive in the forced analyses below
    "id": "open",
    "text": "ReLU beats GELU with Pre-LN",
    "expect": "better",
    "a": {"model.activation": "relu"},
    "b": {"model.activation": "gelu"},
    "where": {"model.norm_placement": "pre"},
}
SHUT = {**OPEN, "id": "shut", "where": {"model.norm_placement": "post"}}  # decided at look 1
ARMS = ["activation=relu,norm_placement=pre", "activation=gelu,norm_placement=pre"]


@pytest.fixture
def study(make_study):
    return make_study(
        "tiny_decide", base={"train.max_steps": 2}, grid=GRID, seeds=[0, 1], claims=[OPEN, SHUT]
    )


def forced(seen):
    """An analysis that decides 'shut' at once and never 'open'; records what each look saw."""

    def outcomes(data, level):
        assert set(claim_outcomes(data, level)) == {c.id for c in data.claims}  # the real one runs
        seeds = data.runs.groupby("variant")["seed"].apply(lambda s: sorted(s.astype(int)))
        seen.append((sorted(c.id for c in data.claims), level, seeds.to_dict()))
        return {c.id: "reproduces" if c.id == "shut" else "inconclusive" for c in data.claims}

    return outcomes


def test_design_looks_and_paired_seeds_for_open_claims_only(study, tmp_path):
    store, seen = tmp_path / "runs", []
    run_until_decided(study, store=store, progress=False, seeds_per_look=1, outcomes=forced(seen))
    log = json.loads((store / "tiny_decide" / LOG).read_text())
    assert log["design"] == {
        "max_looks": 3,
        "alpha": 0.05,
        "spending": "obrien-fleming",
        "seeds_per_look": 1,
        "confirm": False,
        "seeds_at_looks": [2, 3, 4],
    }
    levels = look_levels([2, 3, 4], 0.05)
    assert [(lk["look"], lk["seeds"], lk["seed_set"]) for lk in log["looks"]] == [
        (1, 2, [0, 1]),
        (2, 3, [0, 1, 2]),
        (3, 4, [0, 1, 2, 3]),
    ]
    for lk, lv in zip(log["looks"], levels, strict=True):
        assert lk["info_fraction"] == pytest.approx(lk["seeds"] / 4)
        assert lk["alpha_spent"] == pytest.approx(obf_spent(lk["seeds"] / 4, 0.05))
        assert lk["nominal_alpha"] == pytest.approx(lv["nominal_alpha"])
    assert sum(lk["nominal_alpha"] for lk in log["looks"]) == pytest.approx(0.05)
    assert [lk["decided"] for lk in log["looks"]] == [["shut"], [], []]
    assert log["stopped"] == "max_looks 3 reached"
    assert [r["seeds"] for r in log["rounds"]] == [{v: 2 for v in ARMS}, {v: 3 for v in ARMS}]
    assert log["rounds"][0]["why"] == {v: ["claim open"] for v in ARMS}

    # each look analysed its own seeds; a claim decided at look 1 is not tested again
    assert [s[0] for s in seen] == [["open", "shut"], ["open"], ["open"]]
    assert [s[1] for s in seen] == pytest.approx([lv["nominal_alpha"] for lv in levels])
    assert seen[1][2][ARMS[0]] == [0, 1, 2] and seen[1][2]["activation=relu,norm_placement=post"]
    runs = read_study(store, "tiny_decide").runs
    seeds = runs.groupby("variant")["seed"].apply(lambda s: sorted(s.astype(int))).to_dict()
    assert {v: s for v, s in seeds.items() if v in ARMS} == {v: [0, 1, 2, 3] for v in ARMS}
    assert all(s == [0, 1] for v, s in seeds.items() if v not in ARMS)  # 'shut' got none
    assert (runs["status"] == "completed").all()

    # run again: the design is finished, nothing is added; another design is refused
    run_until_decided(study, store=store, progress=False, seeds_per_look=1, outcomes=forced(seen))
    assert len(read_study(store, "tiny_decide").runs) == len(runs) and len(seen) == 3
    with pytest.raises(ConfigError, match="max_looks 3 -> 4"):
        run_until_decided(study, store=store, progress=False, seeds_per_look=1, max_looks=4)


def test_resumes_an_interrupted_design_with_its_recorded_seeds(study, tmp_path):
    store, seen = tmp_path / "runs", []
    run_until_decided(
        study, store=store, progress=False, seeds_per_look=2, max_looks=2, outcomes=forced(seen)
    )
    path = store / "tiny_decide" / LOG
    log = json.loads(path.read_text())
    assert log["rounds"][0]["new_seeds"] == [2, 3] and log["looks"][-1]["seed_set"] == [0, 1, 2, 3]
    # as if killed while look 2 trained: its seeds come back from the log, not drawn again
    log["looks"] = log["looks"][:1]
    del log["stopped"]
    path.write_text(json.dumps(log))
    for d in (store / "tiny_decide").iterdir():
        meta = yaml.safe_load((d / "run.yaml").read_text())["meta"] if d.is_dir() else {}
        if meta.get("seed") == 3 and meta["variant"] == ARMS[0]:
            shutil.rmtree(d)
    run_until_decided(
        study, store=store, progress=False, seeds_per_look=2, max_looks=2, outcomes=forced(seen)
    )
    again = json.loads(path.read_text())
    assert again["rounds"] == log["rounds"] and again["looks"][-1]["seed_set"] == [0, 1, 2, 3]
    assert seen[-1][2][ARMS[0]] == [0, 1, 2, 3] and len(read_study(store, "tiny_decide").runs) == 12


def test_confirm_until_decided_looks_at_fresh_seeds_only(make_study, tmp_path):
    claim = {**OPEN, "where": {}}
    path = make_study(
        "tiny_decide",
        base={"train.max_steps": 2},
        grid={"model.activation": ["relu", "gelu"]},
        seeds=[0, 1],
        claims=[claim],
    )
    store, seen = tmp_path / "runs", []
    run_until_decided(path, store=store, progress=False, confirm=2, outcomes=forced(seen))
    log = json.loads((store / "tiny_decide" / LOG).read_text())
    assert log["design"]["confirm"] is True and log["design"]["seeds_at_looks"] == [2, 4, 6]
    assert [lk["seed_set"] for lk in log["looks"]] == [[2, 3], [2, 3, 4, 5], [2, 3, 4, 5, 6, 7]]
    runs = read_study(store, "tiny_decide").runs
    assert sorted(set(runs["seed"].astype(int))) == [2, 3, 4, 5, 6, 7]  # no study seed trained
    for d in (store / "tiny_decide").iterdir():
        if (d / "run.yaml").is_file():
            assert yaml.safe_load((d / "run.yaml").read_text())["meta"]["confirm"] is True


def test_a_study_without_claims_is_refused(make_study, tmp_path):
    path = make_study("noclaims", base={"train.max_steps": 2})
    refusal = "claims: `ablate run until-decided` adds seeds for claims only"
    with pytest.raises(ConfigError, match=refusal):
        run_until_decided(path, store=tmp_path / "runs", progress=False)
    assert not (tmp_path / "runs").exists()


# --- the stopping rule under the null: a Monte-Carlo, no training ----------------------------


def _reject_at_some_look(draws, counts, levels, test):
    """Per simulated study: whether some look's test rejects at that look's nominal level."""
    hit = np.zeros(len(draws), dtype=bool)
    for n, lv in zip(counts, levels, strict=True):
        hit |= test(draws[:, :n]) < lv["nominal_alpha"]
    return hit


def _paired_p(x):
    n = x.shape[1]
    t = x.mean(1) / (x.std(1, ddof=1) / np.sqrt(n))
    return 2 * stats.t.sf(np.abs(t), n - 1)


def _tost_p(x, margin=1.0):
    n = x.shape[1]
    se = x.std(1, ddof=1) / np.sqrt(n)
    lower = stats.t.sf((x.mean(1) + margin) / se, n - 1)
    upper = stats.t.cdf((x.mean(1) - margin) / se, n - 1)
    return np.maximum(lower, upper)


@pytest.mark.parametrize(("first", "per", "looks"), [(3, 3, 3), (2, 1, 5), (4, 4, 2)])
def test_sequential_looks_keep_the_type_one_error_at_alpha(first, per, looks):
    alpha, reps = 0.05, 40_000
    counts = look_seed_counts(first, per, looks)
    levels = look_levels(counts, alpha)
    rng = np.random.default_rng(22)
    se = np.sqrt(alpha * (1 - alpha) / reps)

    null = rng.standard_normal((reps, counts[-1]))  # paired differences, true difference 0
    rate = _reject_at_some_look(null, counts, levels, _paired_p).mean()
    assert rate <= alpha + 3 * se, rate
    # the same looks without spending (alpha at every look) err more often: the MC can tell
    naive = [{"nominal_alpha": alpha}] * looks
    assert _reject_at_some_look(null, counts, naive, _paired_p).mean() > alpha + 3 * se

    # equivalence: "equivalent" is the false decision when the true difference is the margin
    at_margin = 1.0 + rng.standard_normal((reps, counts[-1]))
    rate = _reject_at_some_look(at_margin, counts, levels, _tost_p).mean()
    assert rate <= alpha + 3 * se, rate


def test_two_null_claims_holm_within_looks_keep_the_familywise_error():
    alpha, reps, counts = 0.05, 40_000, [3, 6, 9]
    levels = look_levels(counts, alpha)
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((2, reps, counts[-1]))
    wrong = np.zeros(reps, dtype=bool)
    for n, lv in zip(counts, levels, strict=True):
        p = np.sort(np.stack([_paired_p(x[:, :n]), _paired_p(y[:, :n])]), axis=0)
        wrong |= p[0] < lv["nominal_alpha"] / 2  # Holm's first step over the two claims
    assert wrong.mean() <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / reps)


def test_spending_is_obrien_fleming():
    assert obf_spent(1.0, 0.05) == pytest.approx(0.05)
    assert obf_spent(0.0, 0.05) == 0.0
    assert obf_spent(0.5, 0.05) == pytest.approx(2 - 2 * stats.norm.cdf(1.959964 / np.sqrt(0.5)))
    levels = look_levels([3, 6, 9], 0.05)
    assert levels[0]["nominal_alpha"] < levels[1]["nominal_alpha"] < levels[2]["nominal_alpha"]


def test_sequential_needs_its_registration(make_study, tmp_path):
    path = make_study(
        "seqreg",
        base={"train.max_steps": 2},
        grid={"model.activation": ["relu", "gelu"]},
        seeds=[0, 1],
        claims=[{**OPEN, "where": {}}],
    )
    store = tmp_path / "runs"
    with pytest.raises(ConfigError, match="no registration: run `ablate register"):
        run_registered(path, store=store, progress=False, confirm=2)
    reg = register_study(path, 2, store=store, choices=Choices(looks=2, exploratory=True))
    git = ["git", "-C", str(path.parent), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", str(reg), str(path)], ["commit", "-qm", "register"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    with pytest.raises(ConfigError, match="registers max_looks 2, not 3"):
        run_registered(path, store=store, progress=False, confirm=2)
    assert not store.exists()
    design = yaml.safe_load(reg.read_text())["design"]
    assert design["kind"] == "sequential" and design["seeds"] == [2, 3]
