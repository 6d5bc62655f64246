"""The report opens with its answer: each claim in plain words, labelled by its evidence, what
every seed in the store shows where the registered confirmation did not decide it, and the
seeds that would; each table and figure draws one seed set and names it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from scipy import stats

from ablate.claims.registration import build_registration, registration_path, write_registration
from ablate.claims.verdicts import fmt_num, fmt_p
from ablate.report import build_reports
from ablate.results import read_study

ACT = "model.activation"
# final losses per seed: ReLU below GELU on every seed; the three confirmation seeds (3-5)
# scatter too much to decide it, the six seeds together decide it by both tests
RELU = [1.70, 1.71, 1.705, 1.69, 1.745, 1.72]
GELU = [1.73, 1.73, 1.73, 1.75, 1.75, 1.75]
CLAIM = {"id": "relu-wins", "text": "ReLU beats GELU", "expect": "better"}
CLAIM |= {"a": {ACT: "relu"}, "b": {ACT: "gelu"}}


@pytest.fixture
def built(tmp_path, write_run, git, mark_confirm):
    """The study's report: pilot seeds 0-2, confirmation seeds 3-5 under a committed
    registration (its order proven by git)."""
    store, t0 = tmp_path / "runs", 1_000_000_000
    for seed in range(6):
        write_run(store, "ans", {ACT: "relu"}, seed, "completed", RELU[seed])
        write_run(store, "ans", {ACT: "gelu"}, seed, "completed", GELU[seed])
    spec = tmp_path / "ans.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"name": "ans", "description": "Does ReLU beat GELU?", "grid": {ACT: ["relu", "gelu"]}}
            | {"seeds": [0, 1, 2], "claims": [CLAIM]}
        )
    )
    claims = read_study(store, "ans", spec).claims
    design = {"kind": "fixed", "seeds": [3, 4, 5]}
    write_registration(
        registration_path(spec), build_registration("ans", None, claims, 0.01, design)
    )
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "registrations", "ans.yaml")
    git(tmp_path, "commit", "-qm", "register", when=t0)
    commit = git(tmp_path, "rev-parse", "HEAD")
    mark_confirm(store, "ans", {3, 4, 5}, commit, started=t0 + 3600, commit=commit)
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    return path.read_text()


def _t(d):
    """Paired t by hand: mean, 95% t-interval and p of the per-seed differences ``d``."""
    d = np.asarray(d)
    n, m, sd = len(d), d.mean(), d.std(ddof=1)
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return m, m - half, m + half, 2 * stats.t.sf(abs(m) / (sd / math.sqrt(n)), n - 1)


def test_an_inconclusive_confirmation_answers_with_the_pooled_seeds(built):
    md = built
    head = md.split("Does ReLU beat GELU?")[0]
    answer = head.split("## Answer")[1].split("## Claims")[0]  # first, before the claims table
    (item,) = [line for line in answer.splitlines() if line.startswith("- ")]

    confirm = np.subtract(RELU[3:], GELU[3:])
    m, lo, hi, p = _t(confirm)
    assert p > 0.05  # three noisy confirmation seeds decide nothing
    assert item.startswith("- **not decided**: ReLU beats GELU → inconclusive: ")
    assert f"activation=relu − activation=gelu: {fmt_num(m)} nats (95% CI" in item
    assert f"[{fmt_num(lo)}, {fmt_num(hi)}]); t-test Holm {fmt_p(p)}" in item
    assert "exact sign-flip Holm p=0.25 (confirmation 3–5)" in item  # 3 seeds: floor 2/8

    pooled = np.subtract(RELU, GELU)
    m, lo, hi, p = _t(pooled)
    assert (pooled < 0).all() and p < 0.05  # every seed one way: both tests decide
    exploratory = item.split("**Exploratory on all seeds**")[1]
    assert exploratory.startswith(
        " (n = 6 seeds per arm, pooled (exploratory 0–2, confirmation 3–5)): reproduces: "
    )
    assert f"{fmt_num(m)} nats (95% CI [{fmt_num(lo)}, {fmt_num(hi)}])" in exploratory
    assert f"t-test Holm {fmt_p(p)}, exact sign-flip Holm p=0.031" in exploratory  # 2/2^6

    # what would decide it: the pooled difference and SD, and the exact test's 6-seed floor
    assert "Seeds to decide it by both tests: ≈6 seeds per arm (paired by seed)" in item
    assert f"the observed {m:+.3g} with sd {pooled.std(ddof=1):.3g}" in item
    assert "over all 6 seeds of its arms" in item
    lead = answer.split("\n\n")[1]
    assert lead.startswith("**Answer** (1 claim(s): 1 not decided).")


def test_each_table_and_figure_names_one_seed_set(built):
    md = built
    # the figure beside the claims draws each claim on its own seeds
    claims = md.split("## Claims")[1].split("## Against the paper")[0]
    assert "![Each claim on its own seeds](claims.png)" in claims
    assert "Seeds: each panel's own." in claims
    # the pooled views say they are pooled, and exploratory
    pooled = "n = 6 seeds per variant, pooled (exploratory 0–2, confirmation 3–5)"
    figures = md.split("## Figures")[1].split("## Reproducibility")[0]
    captions = [line for line in figures.splitlines() if line.startswith("*Figure")]
    assert captions and all(c.count("Seeds:") == 1 for c in captions)
    assert all(f"Seeds: {pooled}. A pooled view" in c and "exploratory" in c for c in captions)
    quality = next(line for line in md.splitlines() if line.startswith("*Validation quality"))
    assert pooled in quality and "A pooled view of every seed in the store: exploratory" in quality
    # the exploratory comparisons are on the pilot's seeds only
    assert "n = 3 exploratory seeds per variant (0–2)" in md.split("## Comparisons")[1]
