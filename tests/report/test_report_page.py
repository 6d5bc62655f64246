"""The top of a report answers: its claims as one table with the claim engine's numbers, every
table and figure naming its seeds, and no figure that does not apply to the study."""

from __future__ import annotations

import pandas as pd
import yaml

from ablate.claims.outcomes import analyse
from ablate.claims.verdicts import fmt_p
from ablate.report import build_reports
from ablate.report.answer import fmt_effect, seed_span, seeds_text
from ablate.report.declared import layer_gradients
from ablate.results import read_study
from ablate.store import RunStore
from ablate.study.figures import LayerGradients


def test_seed_spans_and_the_seeds_behind_a_table():
    assert seed_span([0, 1, 2, 5, 9, 10, 11]) == "0–2, 5, 9–11"
    runs = pd.DataFrame(
        {
            "variant": ["a"] * 5 + ["b"] * 5,
            "seed": [0, 1, 2, 9, 10] * 2,
            "status": ["completed"] * 9 + ["running"],
            "confirm": [None, None, None, True, True] * 2,
        }
    )
    assert (
        seeds_text(runs) == "n = 4–5 seeds per variant, pooled (exploratory 0–2, confirmation 9–10)"
    )
    explore = runs[runs["confirm"].isna()]
    assert seeds_text(explore) == "n = 3 exploratory seeds per variant (0–2)"
    assert (
        seeds_text(runs[runs["confirm"].notna()]) == "n = 1–2 confirmation seeds per variant (9–10)"
    )


def test_the_report_opens_with_the_answer_table_of_the_claim_engine(tmp_path, norm_pos_store):
    store = norm_pos_store(tmp_path / "runs")
    claim = {"id": "pre-wins", "text": "Pre-LN trains better", "expect": "better"}
    claim |= {"a": {"model.norm_placement": "pre"}, "b": {"model.norm_placement": "post"}}
    claim |= {"where": {"model.pos_encoding": "learned"}}
    grid = {"model.norm_placement": ["post", "pre"], "model.pos_encoding": ["learned", "rope"]}
    spec = tmp_path / "norm_pos.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"name": "norm_pos", "description": "Does Pre-LN win?", "grid": grid}
            | {"seeds": [0, 1, 2], "claims": [claim]}
            | {"figures": {"layer_gradients": {"by": "model.norm_placement"}}}
        )
    )
    RunStore(store).keep_spec("norm_pos", spec)
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    md = path.read_text()
    head = md.split("Does Pre-LN win?")[0]  # the answer comes before the question
    assert head.index("## Answer") < head.index("## Question")
    (row,) = [line for line in head.splitlines() if line.startswith("| pre-wins |")]
    (check,) = analyse(read_study(store, "norm_pos", spec))[1]
    c = check.comparison
    assert c.diff < 0  # Pre-LN lower: the row puts Post-LN first, the gap positive
    cells = [x.strip() for x in row.strip("|").split("|")]
    assert cells[1] == ("norm_placement=post vs norm_placement=pre at pos_encoding=learned")
    d, lo, hi = fmt_effect(-c.diff, -c.ci_hi, -c.ci_lo)
    assert cells[2] == f"{d} [{lo}, {hi}]"
    assert cells[3] == f"{c.n_b} vs {c.n_a}" == "2 vs 3"  # post/learned seed 2 diverged
    assert cells[5] == f"{fmt_p(c.p_flip_adj, '').removeprefix('=')} (permutation)"
    assert check.outcome == "reproduces by t-test only"
    assert cells[6] == f"{check.outcome} (exploratory)"  # no registration: pilot seeds only
    assert "*[exploratory seeds 0–2](provenance.md#claim-pre-wins)*" in head
    # every table and figure says which seeds it rests on
    prov = (path.parent / "provenance.md").read_text()
    assert "*Validation quality per variant, n = 2–3 exploratory seeds per variant (0–2)" in prov
    assert md.count("Seeds: n = 2–3 exploratory seeds per variant (0–2).*") == 4  # 4 figures
    assert "Seeds: exploratory seeds 0–2, the claim's own.*" in md  # the claim's figure


def test_the_gradient_figure_needs_the_values_it_compares(tmp_path, norm_pos_store):
    store = norm_pos_store(tmp_path / "runs")
    study = read_study(store, "norm_pos")
    xiong = LayerGradients(by="model.norm_placement", values=("post", "pre"))
    assert layer_gradients(study, tmp_path, xiong) is not None
    study.runs["model.norm_placement"] = study.runs["model.norm_placement"].replace(
        {"post": "pre_qknorm"}
    )  # a plugin's placement against Pre-LN: not the comparison of Xiong et al.
    assert layer_gradients(study, tmp_path, xiong) is None
