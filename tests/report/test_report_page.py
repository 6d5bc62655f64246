"""The top of a report answers: its claims as one table with the claim engine's numbers, every
table and figure naming its seeds, and no figure that does not apply to the study."""

from __future__ import annotations

import pandas as pd
import yaml

from ablate.claims.outcomes import analyse
from ablate.claims.verdicts import fmt_num, fmt_p
from ablate.report import build_reports
from ablate.report.answer import seed_span, seeds_text
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


def test_the_report_opens_with_the_claims_table_of_the_claim_engine(tmp_path, norm_pos_store):
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
    assert head.index("## Answer") < head.index("## Claims") and head.count("## ") == 2
    (row,) = [line for line in head.splitlines() if line.startswith("| pre-wins |")]
    (check,) = analyse(read_study(store, "norm_pos", spec))[1]
    c = check.comparison
    cells = [x.strip() for x in row.strip("|").split("|")]
    need = check.seeds_needed.n  # the exact test needs more seeds: it says how many
    assert cells[1] == f"{check.outcome} (≈{need} seeds needed)"
    assert check.outcome == "reproduces by t-test only"
    assert cells[3] == fmt_num(c.diff) and cells[4] == f"[{fmt_num(c.ci_lo)}, {fmt_num(c.ci_hi)}]"
    assert cells[6] == f"{fmt_p(c.p_flip_adj, '').removeprefix('=')} (permutation)"
    assert cells[7] == f"{c.n_a} vs {c.n_b}" == "3 vs 2"  # post/learned seed 2 diverged
    assert cells[8] == "exploratory 0–2"
    # every table and figure says which seeds it rests on
    assert "*Validation quality per variant, n = 2–3 exploratory seeds per variant (0–2)" in md
    assert md.count("Seeds: n = 2–3 exploratory seeds per variant (0–2).*") == 4  # 4 figures


def test_the_gradient_figure_needs_the_values_it_compares(tmp_path, norm_pos_store):
    store = norm_pos_store(tmp_path / "runs")
    study = read_study(store, "norm_pos")
    xiong = LayerGradients(by="model.norm_placement", values=("post", "pre"))
    assert layer_gradients(study, tmp_path, xiong) is not None
    study.runs["model.norm_placement"] = study.runs["model.norm_placement"].replace(
        {"post": "pre_qknorm"}
    )  # a plugin's placement against Pre-LN: not the comparison of Xiong et al.
    assert layer_gradients(study, tmp_path, xiong) is None
