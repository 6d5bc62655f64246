"""The report opens with the Answer a paper would print: one table row per claim (condition,
effect a − b with its 95% CI, n, both tests' Holm p, verdict) and one short sentence per claim
with the same numbers and signs, tagged with its registration; the proofs, the tests in full
and what every seed shows are in provenance.md; each figure draws one seed set and names it."""

from __future__ import annotations

import math
import re

import matplotlib.pyplot as plt
import numpy as np
import pytest
import yaml
from scipy import stats

from ablate.claims.outcomes import analyse
from ablate.claims.registration import build_registration, registration_path, write_registration
from ablate.claims.verdicts import fmt_p
from ablate.report import build_reports
from ablate.report.answer import effect_of, fmt_effect
from ablate.report.claim_figure import effect_panel
from ablate.results import read_study

ACT = "model.activation"
# final losses per seed: ReLU below GELU on every seed; the three confirmation seeds (3-5)
# scatter too much to decide it, the six seeds together decide it by both tests
RELU = [1.70, 1.71, 1.705, 1.69, 1.745, 1.72]
GELU = [1.73, 1.73, 1.73, 1.75, 1.75, 1.75]
CLAIM = {"id": "relu-wins", "text": "ReLU beats GELU", "expect": "better"}
CLAIM |= {"a": {ACT: "relu"}, "b": {ACT: "gelu"}}


def _study(tmp_path, write_run, git, mark_confirm, claims=(CLAIM,)):
    """Pilot seeds 0-2, confirmation seeds 3-5 under a committed registration (its order
    proven by git); the study file's path."""
    store, t0 = tmp_path / "runs", 1_000_000_000
    for seed in range(6):
        write_run(store, "ans", {ACT: "relu"}, seed, "completed", RELU[seed])
        write_run(store, "ans", {ACT: "gelu"}, seed, "completed", GELU[seed])
    spec = tmp_path / "ans.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"name": "ans", "description": "Does ReLU beat GELU?", "grid": {ACT: ["relu", "gelu"]}}
            | {"seeds": [0, 1, 2], "claims": list(claims)}
        )
    )
    study = read_study(store, "ans", spec)
    design = {"kind": "fixed", "seeds": [3, 4, 5]}
    write_registration(
        registration_path(spec), build_registration("ans", None, study.claims, 0.01, design)
    )
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "registrations", "ans.yaml")
    git(tmp_path, "commit", "-qm", "register", when=t0)
    commit = git(tmp_path, "rev-parse", "HEAD")
    mark_confirm(store, "ans", {3, 4, 5}, commit, started=t0 + 3600, commit=commit)
    return store, spec, commit


@pytest.fixture
def built(tmp_path, write_run, git, mark_confirm):
    store, spec, commit = _study(tmp_path, write_run, git, mark_confirm)
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    return path, commit


def _t(d):
    """Paired t by hand: mean, 95% t-interval and p of the per-seed differences ``d``."""
    d = np.asarray(d)
    n, m, sd = len(d), d.mean(), d.std(ddof=1)
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return m, m - half, m + half, 2 * stats.t.sf(abs(m) / (sd / math.sqrt(n)), n - 1)


def _answer(md: str) -> str:
    return md.split("## Answer\n")[1].split("\n## ")[0]


def test_the_answer_is_a_table_and_a_sentence_with_the_same_signs(built):
    path, commit = built
    md = path.read_text()
    assert md.index("## Answer") < md.index("Does ReLU beat GELU?")  # before the question
    answer = _answer(md)
    lead, table, items = answer.strip().split("\n\n")[:3]
    assert len(lead.split()) <= 40 and "\n" not in lead  # no preamble beyond a line
    (row,) = [line for line in table.splitlines() if line.startswith("| relu-wins |")]
    cells = [x.strip() for x in row.strip("|").split("|")]

    # the three confirmation seeds: GELU - ReLU > 0 on each, so the larger side comes first
    m, lo, hi, p = _t(np.subtract(GELU[3:], RELU[3:]))
    assert m > 0 and p > 0.05  # three noisy seeds decide nothing
    d, dlo, dhi = fmt_effect(m, lo, hi)
    assert cells[1] == "activation=gelu vs activation=relu"
    assert cells[2] == f"{d} [{dlo}, {dhi}]" and cells[3] == "3"
    assert cells[4] == fmt_p(p, "").removeprefix("=")  # one claim: Holm is the raw p
    assert cells[5] == "0.25 (sign-flip)"  # 3 seeds, all one way: 2/2^3
    assert cells[6] == "inconclusive"

    (item,) = items.splitlines()
    sentence = item.split(": ", 1)[1].split(" *[")[0]
    assert sentence == (
        f"activation=gelu ends {d} nats worse than activation=relu (95% CI {dlo} to {dhi}, "
        "3 seeds); ≈6 seeds would decide it."
    )
    assert len(sentence.split()) <= 30 and len(item.split()) <= 40
    # the same signs: every number of the sentence is the table's, as written there
    assert re.findall(r"-?\d+\.\d+", sentence) == re.findall(r"-?\d+\.\d+", cells[2])
    assert item.endswith(
        f"*[registered {commit[:7]}, order proven by git](provenance.md#claim-relu-wins)*"
    )


def test_the_tag_links_the_proof_and_what_every_seed_shows(built):
    path, commit = built
    prov = (path.parent / "provenance.md").read_text()
    section = prov.split("### Claim relu-wins\n")[1].split("\n## ")[0]
    assert f"registered in {commit[:7]}; order proven by git" in section
    assert "decided on 3 confirmation seed(s) only (fresh seeds, `ablate run confirm`)" in section
    m, lo, hi, p = _t(np.subtract(RELU, GELU))
    assert p < 0.05  # every seed one way: the pooled seeds decide it, exploratory
    pooled = section.split("**Exploratory on all seeds**")[1]
    assert pooled.startswith(" (n = 6 seeds per arm, pooled (exploratory 0–2, confirmation 3–5)): ")
    assert "reproduces: " in pooled and "exact sign-flip p=0.031" in pooled  # 2/2^6
    md = path.read_text()
    assert "Exploratory on all seeds" not in md and "order proven by git:" not in md
    # the HTML page: the same anchor, inside the collapsed provenance
    html = (path.parent / "report.html").read_text()
    assert '<a href="#claim-relu-wins">' in html
    assert html.index('<details id="provenance">') < html.index('<h3 id="claim-relu-wins">')


def test_each_figure_names_one_seed_set(built):
    path, _ = built
    md = path.read_text()
    claims = md.split("## Each claim on its deciding seeds")[1].split("\n## ")[0]
    assert "![Claim relu-wins](claim_relu-wins.png)" in claims
    assert "Seeds: confirmation seeds 3–5, the claim's own.*" in claims
    assert (path.parent / "claim_relu-wins.png").stat().st_size > 5000
    explore = md.split("## Exploratory comparisons (seeds 0–2)")[1]
    assert "n = 3 exploratory seeds per variant (0–2)" in explore  # what the comparisons use
    pooled = "n = 6 seeds per variant, pooled (exploratory 0–2, confirmation 3–5)"
    captions = [line for line in explore.splitlines() if line.startswith("*Figure")]
    assert captions and all(c.count("Seeds:") == 1 and f"Seeds: {pooled}." in c for c in captions)
    assert f"The figures below pool every seed ({pooled}). A pooled view" in explore


def test_an_equivalence_draws_its_margin_as_a_band(tmp_path, write_run, git, mark_confirm):
    same = {"id": "same", "text": "ReLU matches GELU", "expect": "equivalent", "margin": 0.04}
    same |= {"a": {ACT: "relu"}, "b": {ACT: "gelu"}}
    store, spec, _ = _study(tmp_path, write_run, git, mark_confirm, claims=(same,))
    (check,) = analyse(read_study(store, "ans", spec))[1]
    fig, ax = plt.subplots()
    effect_panel(ax, check, effect_of(check), "nats")
    spans = [p.get_extents() for p in ax.patches]
    (band,) = [ax.transData.inverted().transform(e) for e in spans]
    assert band[:, 1] == pytest.approx([-0.04, 0.04])  # the claim's margin, around 0
    plt.close(fig)
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    row = next(line for line in path.read_text().splitlines() if line.startswith("| same |"))
    assert "(TOST)" in row and "margin ±0.04" in path.read_text()
