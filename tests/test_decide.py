"""--until-decided: seeds are added only to the variants of undecided comparisons; resumable."""

from __future__ import annotations

import json

import pandas as pd

from ablate.execution.decide import run_until_decided, undecided_variants
from ablate.report import build_reports
from ablate.report.collect import load_study
from ablate.store.rundir import DECISIONS_FILE as LOG


def tiny_study(tmp_path):
    text = tmp_path / "tiny.txt"
    text.write_text("".join(f"line {i}: the quick brown fox jumps.\n" for i in range(300)))
    spec = tmp_path / "tiny_decide.yaml"
    spec.write_text(
        f"""name: tiny_decide
base:
  model: {{d_model: 16, n_layers: 1, n_heads: 2, max_seq_len: 16}}
  data: {{dataset: {text}, seq_len: 16, batch_size: 4}}
  train: {{max_steps: 4, eval_interval: 4, eval_batches: 1, final_eval_batches: 1,
          log_interval: 2, checkpoint_interval: 4, threads: 1, progress: false}}
  tracking: {{wandb: false}}
grid:
  model.norm_placement: [post, pre]
seeds: [0, 1]
"""
    )
    return spec


def test_until_decided_adds_seeds_only_where_undecided_and_resumes(tmp_path):
    spec, store = tiny_study(tmp_path), tmp_path / "runs"
    calls = []

    def post_is_undecided(study):  # stands in for the analysis: one comparison stays open
        calls.append(sorted(study.runs["seed"].astype(int)))
        assert undecided_variants(study) is not None  # the real analysis runs on the store
        return {"norm_placement=post": ["post vs pre (forced)"]}

    kw = dict(store=store, progress=False, undecided=post_is_undecided)
    run_until_decided(spec, max_seeds=3, **kw)
    runs = load_study(store, "tiny_decide").runs
    seeds = runs.groupby("variant")["seed"].apply(lambda s: sorted(s.astype(int))).to_dict()
    assert seeds == {"norm_placement=post": [0, 1, 2], "norm_placement=pre": [0, 1]}
    assert (runs["status"] == "completed").all()
    log = json.loads((store / "tiny_decide" / LOG).read_text())
    assert log["rounds"] == [
        {
            "seeds": {"norm_placement=post": 2},
            "why": {"norm_placement=post": ["post vs pre (forced)"]},
        }
    ]
    assert log["stopped"] == "max_seeds 3 reached"

    # resumed with a higher cap: seed 2 is found in the store (not retrained), seed 3 is added
    run_until_decided(spec, max_seeds=4, **kw)
    runs = load_study(store, "tiny_decide").runs
    post = runs[runs["variant"] == "norm_placement=post"]
    assert sorted(post["seed"].astype(int)) == [0, 1, 2, 3] and len(runs) == 6
    assert calls[-1] == [0, 0, 1, 1, 2, 3]

    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    md = path.read_text()
    assert "## Extra seeds (--until-decided)" in md
    assert "round 1: **norm_placement=post** got seed 2 (inconclusive: post vs pre (forced))" in md


def test_decided_study_gets_no_extra_seeds(tmp_path):
    spec, store = tiny_study(tmp_path), tmp_path / "runs"
    run_until_decided(spec, store=store, progress=False, undecided=lambda s: {}, max_seeds=5)
    runs = load_study(store, "tiny_decide").runs
    assert len(runs) == 4 and set(pd.to_numeric(runs["seed"])) == {0, 1}
    assert json.loads((store / "tiny_decide" / LOG).read_text())["stopped"] == "decided"
