"""Reports: statistics against hand-computed values, and whole reports from synthetic stores."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from ablate.claims.comparisons import Arm, Comparison, adjust, compare
from ablate.claims.power import comparison_seeds_needed
from ablate.claims.stats import (
    bootstrap_diff_ci,
    holm,
    mean_ci,
    one_sample,
    paired_t,
    summarize,
    tost,
    welch,
    welch_diff,
)
from ablate.claims.verdicts import verdict
from ablate.config import ConfigError
from ablate.report import build_reports
from ablate.results import read_study
from ablate.store import RunStore

# --- statistics, by hand ----------------------------------------------------------------------


def test_mean_ci_matches_the_hand_computed_t_interval():
    # [1, 2, 3]: mean 2, s = sqrt(((1-2)^2 + 0 + (3-2)^2) / 2) = 1, t_{2,0.975} = 4.302653
    half = 4.302653 * 1 / math.sqrt(3)  # 2.484138
    mean, lo, hi = mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert lo == pytest.approx(2 - half, abs=1e-5)
    assert hi == pytest.approx(2 + half, abs=1e-5)
    assert half == pytest.approx(2.4841, abs=1e-4)


def test_mean_ci_edge_cases():
    m, lo, hi = mean_ci([5.0])
    assert m == 5.0 and math.isnan(lo) and math.isnan(hi)  # one seed: no interval
    assert all(math.isnan(v) for v in mean_ci([]))
    # non-finite values (diverged runs) are dropped, not averaged
    assert mean_ci([1.0, 2.0, 3.0, float("nan"), float("inf"), None]) == mean_ci([1.0, 2.0, 3.0])
    # 90%: t_{3,0.95} = 2.353363; [2, 4, 6, 8]: mean 5, s = sqrt(20/3) = 2.581989
    m, lo, hi = mean_ci([2, 4, 6, 8], confidence=0.90)
    assert (m, hi - m) == pytest.approx((5.0, 2.353363 * 2.581989 / 2), abs=1e-5)


def test_welch_matches_the_hand_computed_statistic_and_df():
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.0, 10.0]
    # mean_a = 2.5, s_a^2 = 5/3, s_a^2/n_a = 5/12; mean_b = 6, s_b^2 = 10, s_b^2/n_b = 2
    se2 = 5 / 12 + 2
    t = (2.5 - 6) / math.sqrt(se2)  # -2.251436
    df = se2**2 / ((5 / 12) ** 2 / 3 + 2**2 / 4)  # Welch-Satterthwaite: 5.520788
    res = welch(a, b)
    assert res.t == pytest.approx(t, rel=1e-9) and res.t == pytest.approx(-2.251436, abs=1e-6)
    assert res.df == pytest.approx(df, rel=1e-9) and res.df == pytest.approx(5.520788, abs=1e-6)
    assert 0.05 < res.p < 0.1  # two-sided p from t with 5.52 df
    assert math.isnan(welch([1.0], [1.0, 2.0]).p)


def test_one_sample_against_a_reference_matches_the_hand_computed_t():
    # [1, 2, 3] against 0.5: diff 1.5, s = 1, se = 1/sqrt(3), t = 1.5 * sqrt(3) = 2.598076 on
    # 2 df: two-sided p = 0.121690 (t distribution, 2 df: p = 1 - t / sqrt(t^2 + 2))
    t = 1.5 * math.sqrt(3)
    r = one_sample([1.0, 2.0, 3.0], 0.5)
    assert (r.n, r.mean, r.diff) == (3, 2.0, 1.5)
    assert r.p == pytest.approx(1 - t / math.sqrt(t**2 + 2), rel=1e-9)
    assert r.p == pytest.approx(0.121690, abs=1e-6)
    half = 4.302653 / math.sqrt(3)
    assert (r.lo, r.hi) == pytest.approx((1.5 - half, 1.5 + half), abs=1e-5)
    assert math.isnan(one_sample([2.0], 0.5).p)  # one seed: no test


def test_bootstrap_ci_is_seeded_and_brackets_the_difference():
    a, b = [1.0, 1.1, 0.9], [2.0, 2.1, 1.9]
    d, lo, hi = bootstrap_diff_ci(a, b, seed=0)
    assert d == pytest.approx(-1.0)
    assert lo < d < hi < 0  # clearly separated: CI excludes 0
    # resample means of 3 values lie within [min, max]: the CI can't leave [-1.2, -0.8]
    assert -1.2 - 1e-12 <= lo and hi <= -0.8 + 1e-12
    assert bootstrap_diff_ci(a, b, seed=0) == (d, lo, hi)
    assert math.isnan(bootstrap_diff_ci([1.0], b)[1])


def test_paired_t_matches_the_hand_computed_statistic_and_interval():
    # per-seed differences d = [0.5, 1.0, 1.5]: mean 1, s_d = 0.5, se = 0.5/sqrt(3) = 0.288675,
    # t = 3.464102 on 2 df: p = 1 - t/sqrt(t^2 + 2) = 0.074180; CI 1 ± 4.302653 · se
    r = paired_t([1.0, 2.0, 4.0], [0.5, 1.0, 2.5])
    t = 1 / (0.5 / math.sqrt(3))
    assert r.test == "paired t" and r.diff == pytest.approx(1.0) and r.df == 2
    assert r.t == pytest.approx(t, rel=1e-9) and r.sd == pytest.approx(0.5)
    assert r.p == pytest.approx(1 - t / math.sqrt(t**2 + 2), rel=1e-9)
    assert r.p == pytest.approx(0.074180, abs=1e-6)
    half = 4.302653 * 0.5 / math.sqrt(3)
    assert (r.lo, r.hi) == pytest.approx((1 - half, 1 + half), abs=1e-5)


def test_welch_interval_uses_the_satterthwaite_df():
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.0, 10.0]
    se = math.sqrt(5 / 12 + 2)  # see test_welch_matches_the_hand_computed_statistic_and_df
    r = welch_diff(a, b)
    half = stats.t.ppf(0.975, 5.520788) * se
    assert r.test == "Welch t" and r.diff == -3.5
    assert (r.lo, r.hi) == pytest.approx((-3.5 - half, -3.5 + half), abs=1e-5)


def test_compare_pairs_by_seed_only_when_both_arms_share_the_seeds():
    a, b = [1.0, 2.0, 4.0], [0.5, 1.0, 2.5]
    # aligned by seed, not order
    c = compare(Arm(a[::-1], seeds=[2, 1, 0]), Arm(b, seeds=[0, 1, 2]))
    assert c.test == "paired t" and c.p == pytest.approx(0.074180, abs=1e-6)
    c = compare(Arm(a, seeds=[0, 1, 2]), Arm(b, seeds=[0, 1, 3]))
    assert c.test == "Welch t" and c.p == pytest.approx(stats.ttest_ind(a, b, equal_var=False)[1])
    assert compare(a, b).test == "Welch t"  # seeds unknown


def test_holm_matches_the_hand_computed_adjustment():
    # sorted p: 0.01, 0.03, 0.04 -> 3·0.01 = 0.03, 2·0.03 = 0.06, max(0.06, 1·0.04) = 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    adj = holm([0.02, float("nan"), 0.5])  # nan is not counted: k = 2
    assert adj[0] == pytest.approx(0.04) and math.isnan(adj[1]) and adj[2] == pytest.approx(0.5)


def test_tost_matches_the_hand_computed_one_sided_tests():
    # paired d = [0.001, 0.003, 0.002], margin 0.01: mean 0.002, se = 0.001/sqrt(3); the binding
    # test is the upper bound: t = (0.002 - 0.01)/se = -sqrt(192) on 2 df, one-sided
    # p = (1 - |t|/sqrt(t^2 + 2))/2 = (1 - sqrt(192/194))/2 = 0.002584
    a, b = [1.001, 1.003, 1.002], [1.0, 1.0, 1.0]
    assert tost(a, b, 0.01, paired=True) == pytest.approx((1 - math.sqrt(192 / 194)) / 2, rel=1e-4)
    assert tost(a, b, 0.001, paired=True) > 0.5  # mean 0.002 is outside ±0.001
    assert math.isnan(tost([1.0], b, 0.01, paired=False))


def _paired(diff: float, sd: float) -> Comparison:
    """A paired comparison of two seeds with the given difference and SD (what power uses)."""
    return Comparison("a", "b", (0.0, 0.0), (0.0, 0.0), diff=diff, sd=sd, test="paired t")


def test_seeds_needed_matches_the_power_of_the_t_test():
    # effect size 1 (diff = sd): a paired t-test at alpha 0.05 needs n = 10 for 80% power
    # (Cohen's tables; G*Power: n = 10, power 0.803). Check with the noncentral t by hand.
    assert comparison_seeds_needed(_paired(0.5, 0.5)) == 10

    def power(n, d=1.0):
        crit = stats.t.ppf(0.975, n - 1)
        nc = d * math.sqrt(n)
        return 1 - stats.nct.cdf(crit, n - 1, nc) + stats.nct.cdf(-crit, n - 1, nc)

    assert power(9) < 0.8 <= power(10)
    # near-zero difference: deciding it means showing equivalence, not a difference
    n_eq = comparison_seeds_needed(_paired(0.0, 0.005))  # effect (0.01 - 0)/0.005 = 2, one-sided
    assert n_eq is not None and 3 <= n_eq <= 5
    assert comparison_seeds_needed(_paired(0.1, 0.0)) is None


def test_verdict_equivalent_within_the_margin():
    c = compare(
        Arm([1.500, 1.503, 1.498], "pre", [0, 1, 2]),
        Arm([1.501, 1.502, 1.500], "post", [0, 1, 2]),
        margin=0.01,
    )
    v = verdict(c)
    assert v.kind == "equivalent" and v.winner is None
    assert "pre ≈ post: equivalent within ±0.01 nats" in v.text and "TOST" in v.text


def test_verdict_inconclusive_says_how_many_seeds_would_decide_it():
    c = compare(Arm([1.50, 1.56, 1.47], "pre"), Arm([1.55, 1.58, 1.54], "post"))
    v = verdict(c)
    assert v.kind == "inconclusive" and v.winner is None and v.seeds_needed
    assert f"≈{v.seeds_needed} seeds per variant would decide it" in v.text
    assert "beats" not in v.text


def test_verdict_names_a_clear_winner_with_the_t_interval():
    c = compare(Arm([1.50, 1.52, 1.48], "pre"), Arm([1.81, 1.80, 1.83], "post"))
    v = verdict(c, where="at warmup=0")
    assert v.kind == "better" and v.winner == "pre"
    assert v.text.startswith("pre beats post by 0.313 nats (95% CI [")
    assert "Welch t" in v.text and "Holm" in v.text and v.text.endswith("at warmup=0")
    lo, hi = (float(x) for x in v.text.split("CI [")[1].split("]")[0].split(", "))
    assert (lo, hi) == pytest.approx((-c.ci_hi, -c.ci_lo), abs=1e-3)
    assert verdict(c, lower_is_better=False).winner == "post"


def test_holm_turns_a_nominal_winner_inconclusive():
    # p ≈ 0.03 alone names a winner; among 3 comparisons Holm multiplies it by 3
    a, b = [1.0, 1.1, 1.2, 1.05], [1.2, 1.25, 1.35, 1.22]
    c = compare(a, b)
    assert 0.0167 < c.p < 0.05 and verdict(c).kind == "better"
    noise = compare([1.0, 1.2, 1.1], [1.1, 1.0, 1.2])
    c2, *_ = adjust([c, noise, noise])
    assert c2.p_adj == pytest.approx(min(1, 3 * c.p)) and verdict(c2).kind == "inconclusive"


def test_verdict_on_diverged_runs():
    c = compare(Arm([1.5, 1.6, 1.55], "pre"), Arm([], "post", diverged=3))
    v = verdict(c, where="at warmup_ratio=0")
    assert v.kind == "diverged" and v.winner == "pre"
    assert v.text == "post diverged in 3/3 seeds (pre: 0/3) at warmup_ratio=0"
    partial = verdict(compare(Arm([1.5, 1.6], diverged=1), [1.5, 1.6, 1.55]))
    assert "a diverged in 1/3 seeds" in partial.text
    assert verdict(compare([1.5], [1.6, 1.7])).kind == "too_few"


def test_summarize_counts_diverged_runs_and_never_averages_them():
    runs = pd.DataFrame(
        {
            "variant": ["post"] * 3 + ["pre"] * 3,
            "status": ["completed", "diverged", "diverged", "completed", "completed", "running"],
            "final_val_loss": [2.0, np.nan, 1e9, 1.0, 3.0, 0.5],
            "diverged_step": [np.nan, 40, 55, np.nan, np.nan, np.nan],
        }
    )
    s = summarize(runs, ["variant"], ["final_val_loss"]).set_index("variant")
    assert s.loc["post", "diverged"] == 2 and s.loc["post", "diverged_steps"] == [40, 55]
    assert s.loc["post", "final_val_loss_mean"] == 2.0  # only the completed run
    assert s.loc["post", "final_val_loss_n"] == 1
    assert s.loc["pre", "final_val_loss_mean"] == 2.0 and s.loc["pre", "running"] == 1


# --- synthetic stores through the store API --------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory, norm_pos_store):
    root = tmp_path_factory.mktemp("report")
    store = norm_pos_store(root / "runs")
    spec = root / "norm_pos.yaml"  # the study file `ablate run` keeps: it asks for the gradients
    grid = {"model.norm_placement": ["post", "pre"], "model.pos_encoding": ["learned", "rope"]}
    figures = {"layer_gradients": {"by": "model.norm_placement", "values": ["post", "pre"]}}
    spec.write_text(
        yaml.safe_dump(
            {"name": "norm_pos", "grid": grid, "seeds": [0, 1, 2]} | {"figures": figures}
        )
    )
    RunStore(store).keep_spec("norm_pos", spec)
    paths = build_reports([], store=store, out=root / "reports", quiet=True)
    return root, paths


def test_report_from_a_synthetic_store(built):
    root, paths = built
    out = root / "reports" / "norm_pos"
    assert paths == [out / "report.md"]
    results = pd.read_csv(out / "results.csv")
    assert len(results) == 12 and results["run_id"].is_unique
    for col in ("variant", "seed", "status", "model.norm_placement", "model.pos_encoding"):
        assert col in results
    assert (results["status"] == "diverged").sum() == 1
    md = (out / "report.md").read_text()
    prov = (out / "provenance.md").read_text()
    assert "PARTIAL: 11 of 12 runs finished; 1 interrupted" in md
    assert md.index("## Answer") < md.index("## Question") < md.index("## Exploratory")
    assert prov.index("How to read the comparisons") < prov.index("## Comparisons")
    assert prov.index("## Comparisons") < prov.index("## Results per variant")
    # pre clearly beats post with everything else fixed (post's loss is higher)
    rows = {
        tuple(c.strip() for c in line.strip("|").split("|")[:3]): line
        for line in md.splitlines()
        if line.startswith(("| norm_placement |", "| pos_encoding |"))
    }
    assert rows[("norm_placement", "pos_encoding=rope", "post vs pre")].endswith("| worse |")
    # same loss up to noise: no winner between position encodings
    same = rows[("pos_encoding", "norm_placement=pre", "learned vs rope")]
    assert "| 3 (0) vs 2 (0) |" in same and "| inconclusive (≈" in same
    assert "| BH p |" in md and "| 95% t-CI |" in prov and "| bootstrap CI (secondary) |" in prov
    # the diverged run is counted, and the mean over the finite ones is labelled as such
    assert "1/3 (step 40)" in prov and "(mean of 2 finite)" in prov
    assert "| 2 (1) vs 3 (0) |" in rows[("norm_placement", "pos_encoding=learned", "post vs pre")]
    for png in ("val_loss_curves.png", "final_val_loss.png", "grad_norm_layers.png"):
        assert (out / png).stat().st_size > 1000
        assert f"]({png})" in md
    assert (out / "length_extrapolation.png").is_file()
    assert not (out / "heatmap_batch_lr.png").exists()  # no batch-size axis here
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 4 and "<table>" in html
    assert 'src="' not in html.replace('src="data:image/png;base64,', "")  # self-contained
    assert not list((root / "reports").glob(".*"))  # no temp dirs left behind


def test_length_extrapolation_table(built):
    root, _ = built
    md = (root / "reports" / "norm_pos" / "report.md").read_text()
    section = md.split("## Exploratory comparisons")[1].split("\n## ")[0]
    header = next(line for line in section.splitlines() if line.startswith("| variant"))
    assert header == "| variant | n | 1× | 2× | 4× |"
    learned = next(line for line in section.splitlines() if line.startswith("| pre-learned"))
    assert learned.count("n/a (no positions past max_seq_len)") == 2
    rope = next(line for line in section.splitlines() if line.startswith("| pre-rope"))
    assert "n/a" not in rope and "| 1.8940 ± 0.0141 [" in rope  # 2 seeds: 1.584+.3, 1.604+.3


def test_grad_norm_data_reach_the_figure(built):
    root, _ = built
    study = read_study(root / "runs", "norm_pos")
    g = study.metrics[study.metrics["metric"].str.startswith("grad_norm/layer_")]
    assert set(g["step"]) == {0} and g["run_id"].nunique() == 12
    assert set(g["metric"]) == {f"grad_norm/layer_{i:02d}" for i in range(4)}
    md = (root / "reports" / "norm_pos" / "report.md").read_text()
    # the figure draws the FFN output weight's gradient, the quantity the claim tests
    assert "Per-layer FFN output weight's gradient norm at initialisation (step 0)" in md
    assert "the quantity the ffn_grad_slope@init claim tests" in md


def test_long_form_metrics_table(built):
    root, _ = built
    study = read_study(root / "runs", "norm_pos")
    m = study.metrics
    for col in ("run_id", "variant", "seed", "status", "model.norm_placement", "step", "metric"):
        assert col in m
    assert not m.duplicated(["run_id", "step", "metric"]).any()  # one row per run×step×metric
    assert set(m["metric"]) >= {"train/loss", "val/loss", "lr", "grad_norm/global"}


def test_rebuilding_gives_the_same_files(built, tmp_path):
    root, _ = built
    build_reports(["norm_pos"], store=root / "runs", out=tmp_path, quiet=True)
    first, second = root / "reports" / "norm_pos", tmp_path / "norm_pos"
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_batch_lr_heatmap(tmp_path, write_run):
    for bs in (8, 32):
        for lr in (1e-3, 3e-3):
            for seed in range(2):
                final = 1.5 + (0.1 if bs == 32 else 0) - (0.05 if lr == 3e-3 else 0)
                status = "diverged" if (bs, lr, seed) == (32, 3e-3, 1) else "completed"
                axes = {"data.batch_size": bs, "optim.lr": lr}
                write_run(tmp_path / "runs", "batch_lr", axes, seed, status, final, div_step=30)
    build_reports(["batch_lr"], store=tmp_path / "runs", out=tmp_path / "reports", quiet=True)
    out = tmp_path / "reports" / "batch_lr"
    assert (out / "heatmap_batch_lr.png").stat().st_size > 1000
    assert not (out / "grad_norm_layers.png").exists()  # no norm-placement axis
    md = (out / "report.md").read_text()
    assert "PARTIAL" not in md and "over batch size × lr" in md
    assert "its runs trained with" not in md  # the runs used optim.lr unscaled


def test_batch_lr_heatmap_shows_the_peak_lr_used(tmp_path, write_run):
    from ablate.report.figure_data import heatmap_cells, used_differs

    store = tmp_path / "runs"
    for bs in (16, 64):
        for lr in (1e-3, 3e-3):
            for seed in range(2):
                axes = {"data.batch_size": bs, "optim.lr": lr}
                write_run(store, "sq", axes, seed, "completed", 1.5 + lr)
    for run in RunStore(store).runs("sq"):  # sqrt scaling: the summary records the peak LR
        s = run.read_summary()
        bs, lr = s["axes"]["data.batch_size"], s["axes"]["optim.lr"]
        run.write_summary({**s, "lr": lr * math.sqrt(bs / 16)})
    study = read_study(store, "sq")
    assert used_differs(study.runs, "optim.lr", "lr")
    axes, values = ("data.batch_size", "optim.lr"), ([16, 64], [1e-3, 3e-3])
    _, annot = heatmap_cells(study.runs, axes, values, "final_val_loss", "lr")
    assert annot.loc["64", "0.001"].endswith("lr 0.002")  # 1e-3 · sqrt(64/16)
    assert annot.loc["16", "0.003"].endswith("lr 0.003")
    (path,) = build_reports(["sq"], store=store, out=tmp_path / "r", quiet=True)
    assert "the lr its runs trained with (their summary's lr), which differs" in path.read_text()


def test_study_yaml_argument_and_errors(built, tmp_path):
    root, _ = built
    spec = tmp_path / "whatever.yaml"
    spec.write_text("name: norm_pos\ndescription: |\n  Does Pre-LN train better?\n  Line two.\n")
    paths = build_reports([str(spec)], store=root / "runs", out=tmp_path / "r", quiet=True)
    blocks = paths[0].read_text().split("\n\n")  # title, PARTIAL, Answer: no claims, question
    assert blocks[3].startswith("No claims: the study file states none")
    assert blocks[4] == "## Question" and blocks[5].startswith("Does Pre-LN")
    with pytest.raises(ConfigError, match="studies present: norm_pos"):
        build_reports(["nope"], store=root / "runs", out=tmp_path / "r", quiet=True)
    with pytest.raises(ConfigError, match=r"no runs in the store \(run `ablate run"):
        build_reports([], store=tmp_path / "missing", out=tmp_path / "r", quiet=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no runs in the store"):
        build_reports([], store=tmp_path / "empty", out=tmp_path / "r", quiet=True)


def test_shipped_study_yaml_gives_description_and_findings(built, tmp_path, monkeypatch):
    root, _ = built
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "norm_pos.yaml").write_text(
        "name: norm_pos\ndescription: The question.\nfindings: |\n  Reproduces: pre wins.\n"
    )
    monkeypatch.chdir(tmp_path)  # `make report` runs from the repository root
    (path,) = build_reports([], store=root / "runs", out=tmp_path / "r", quiet=True)
    md = path.read_text()
    assert "## Question\n\nThe question." in md
    assert "\n\nReproduces: pre wins.\n\n## Exploratory" in md  # no claims: no "(hand-written)"


def test_reference_value_gets_a_table_and_a_line(built, tmp_path, monkeypatch):
    root, _ = built
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "norm_pos.yaml").write_text(
        "name: norm_pos\nreference: {value: 0.5, label: The Paper}\n"
    )
    monkeypatch.chdir(tmp_path)
    (path,) = build_reports([], store=root / "runs", out=tmp_path / "r", quiet=True)
    md = path.read_text()
    section = md.split("## Exploratory comparisons")[1].split("\n## ")[0]
    assert "*Against the reference value (The Paper: 0.5): final validation loss" in section
    rows = [line for line in section.splitlines() if "| 0.5 |" in line]
    assert rows and all("above the reference" in row and "| 0/" in row for row in rows)
    assert "Dashed line: The Paper (0.5)." in md  # the figures draw it and say so
    # a bad reference is a one-line error naming the key
    (tmp_path / "studies" / "norm_pos.yaml").write_text("name: norm_pos\nreference: {value: x}\n")
    with pytest.raises(ConfigError, match=r"norm_pos.yaml: reference.value: must be a finite"):
        build_reports([], store=root / "runs", out=tmp_path / "r", quiet=True)


def test_cli_report_on_an_empty_store_exits_2(tmp_path):
    from typer.testing import CliRunner

    from ablate.cli import app

    res = CliRunner().invoke(app, ["report", "--store", str(tmp_path / "none")])
    assert res.exit_code == 2
    assert "no runs in the store" in res.output and len(res.output.strip().splitlines()) == 1


# --- a real tiny study, trained by the runner ----------------------------------------------


def test_report_from_a_real_tiny_study(tmp_path):
    runner = pytest.importorskip(
        "ablate.execution.runner", reason="ablate.execution.runner not available yet"
    )
    text = tmp_path / "tiny.txt"
    text.write_text(
        "".join(f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(400))
    )
    spec = tmp_path / "tiny_study.yaml"
    spec.write_text(
        f"""name: tiny_study
description: Two norm placements on a tiny model (test).
base:
  model: {{d_model: 16, n_layers: 1, n_heads: 2, max_seq_len: 16}}
  data: {{dataset: {text}, seq_len: 16, batch_size: 4}}
  train: {{max_steps: 20, eval_interval: 10, eval_batches: 2, final_eval_batches: 2,
          log_interval: 5, grad_norm_interval: 10, checkpoint_interval: 10, threads: 1,
          progress: false}}
  tracking: {{wandb: false}}
grid:
  model.norm_placement: [post, pre]
seeds: [0, 1]
figures:
  layer_gradients: {{by: model.norm_placement}}
"""
    )
    runner.run_study(spec, store=tmp_path / "runs", progress=False)
    paths = build_reports(
        [str(spec)], store=tmp_path / "runs", out=tmp_path / "reports", quiet=True
    )
    out = paths[0].parent
    assert len(pd.read_csv(out / "results.csv")) == 4
    assert read_study(tmp_path / "runs", "tiny_study", spec).expected_runs == 4
    md = paths[0].read_text()
    assert "Two norm placements" in md and "## Exploratory comparisons (seeds 0–1)" in md
    assert (out / "val_loss_curves.png").is_file() and (out / "grad_norm_layers.png").is_file()


# --- figures agree with tables -----------------------------------------------------------------


def test_val_curve_ends_at_the_full_split_final_loss(built):
    from ablate.report.figure_data import with_final_points

    root, _ = built
    study = read_study(root / "runs", "norm_pos")
    curves = study.metrics[study.metrics["metric"] == "val/loss"]
    out = with_final_points(curves, study.runs)
    done = study.runs[study.runs["status"] == "completed"].set_index("run_id")
    last = out.sort_values("step").groupby("run_id").tail(1).set_index("run_id")
    for run_id, r in done.iterrows():
        assert last.loc[run_id, "value"] == r["final_val_loss"]
        assert last.loc[run_id, "step"] == r["steps"]
    assert not out.duplicated(["run_id", "step"]).any()


def test_t_errorbar_is_the_tables_interval():
    from ablate.claims.stats import t_errorbar

    assert t_errorbar([1.0, 2.0, 3.0]) == pytest.approx(mean_ci([1.0, 2.0, 3.0])[1:])
    assert t_errorbar([2.0]) == (2.0, 2.0)


def test_grad_norm_figure_is_not_repeated_per_optimiser_axis(tmp_path, write_run):
    for norm in ("post", "pre"):
        for warm in (0.0, 0.1):
            for seed in range(2):
                axes = {"model.norm_placement": norm, "optim.warmup_ratio": warm}
                write_run(tmp_path / "runs", "nw", axes, seed, "completed", 1.5 + warm)
    spec = tmp_path / "nw.yaml"
    grid = {"model.norm_placement": ["post", "pre"], "optim.warmup_ratio": [0.0, 0.1]}
    figures = {"layer_gradients": {"by": "model.norm_placement"}}
    spec.write_text(yaml.safe_dump({"grid": grid, "seeds": [0, 1], "figures": figures}))
    (path,) = build_reports([str(spec)], store=tmp_path / "runs", out=tmp_path / "r", quiet=True)
    md = path.read_text()
    assert "One line per seed" in md
    assert "Optimiser/schedule axes (warmup_ratio) cannot change step 0" in md


def test_reproducibility_section_flags_chaotic_variants(tmp_path, write_run):
    from ablate.report.repro import chaotic_variants

    for v, spread in (("a", 0.01), ("b", 0.012), ("c", 0.011), ("d", 0.3)):
        for seed in range(3):
            axes = {"model.activation": {"a": "relu", "b": "gelu", "c": "swiglu", "d": "geglu"}[v]}
            write_run(tmp_path / "runs", "ch", axes, seed, "completed", 1.5 + spread * (seed - 1))
    study = read_study(tmp_path / "runs", "ch")
    # seed sd = spread (values spread·(-1, 0, 1)): median of 0.01, 0.011, 0.012, 0.3 = 0.0115
    (flag,) = chaotic_variants(study)
    assert flag[0] == "geglu" and flag[1] == pytest.approx(0.3) and flag[2] == pytest.approx(0.0115)
    (path,) = build_reports(["ch"], store=tmp_path / "runs", out=tmp_path / "r", quiet=True)
    md = (path.parent / "provenance.md").read_text()
    assert "## Reproducibility" in md and "**Chaotic variants**" in md
    assert "geglu (seed sd 0.3" in md


def test_report_is_logged_to_wandb_offline_in_the_study_group(built, tmp_path, monkeypatch):
    from ablate.config import TrackingConfig
    from ablate.report.plots import make_figures
    from ablate.report.wandb_report import log_report

    root, _ = built
    study = read_study(root / "runs", "norm_pos")
    assert log_report(study, {}, []) is None  # the runs were tracked with wandb: false
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert log_report(study, {}, [], TrackingConfig()) is None
    monkeypatch.setenv("WANDB_MODE", "offline")
    figures = make_figures(study, tmp_path)
    tables = {"verdicts": pd.DataFrame({"a": ["x"]})}
    assert log_report(study, tables, figures[:1], TrackingConfig()) == "offline"
    runs = list((study.path / ".report-wandb" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


def test_the_quality_table_sets_the_final_train_loss_against_the_val_loss(tmp_path, write_run):
    """Final train loss: the mean logged train/loss over the last 10% of a run's steps (steps
    91-100 of 100: logged at 100, and at 95 in one run); the gap is the final val loss minus
    it."""
    store = tmp_path / "runs"
    for seed in range(2):
        write_run(store, "gap", {"model.norm_placement": "pre"}, seed, "completed", 1.5)
    first = next(RunStore(store).runs("gap"))
    first.append_metrics(95, {"train/loss": 1.25})
    first.append_metrics(90, {"train/loss": 9.0})  # not in the last 10%
    study = read_study(store, "gap")
    for r in study.runs.to_dict("records"):
        run = RunStore(store).run("gap", r["run_id"])
        logged = {s: v for s, m, v in run.read_metrics() if m == "train/loss"}
        tail = [logged[100]] + ([1.25] if run.run_id == first.run_id else [])
        assert r["final_train_loss"] == pytest.approx(np.mean(tail))
        assert r["train_val_gap"] == pytest.approx(1.5 - np.mean(tail))
    (path,) = build_reports(["gap"], store=store, out=tmp_path / "r", quiet=True)
    text = (path.parent / "provenance.md").read_text()
    assert "| final train loss | val − train |" in text
    assert "the last 10% of steps (one batch per log step, dropout on)" in text


def test_a_length_past_max_seq_len_is_told_apart_from_one_not_evaluated(tmp_path, write_run):
    from ablate.report.tables import length_table

    store = tmp_path / "runs"
    long = {"1": 1.5, "2": 1.6}
    for seed in range(2):  # rope evaluated at 2x; learned stops at its table of 32 positions;
        # alibi could go past 1x (max_seq_len 64) but has no 2x loss: not a position limit
        write_run(
            store, "len", {"model.pos_encoding": "rope"}, seed, "completed", 1.5, lengths=long
        )
        for pos, limit in (("learned", 32), ("alibi", 64)):
            axes, config = {"model.pos_encoding": pos}, {"model.max_seq_len": limit}
            lengths = {"1": 1.5, "2": None}
            write_run(store, "len", axes, seed, "completed", 1.5, lengths=lengths, config=config)
    table = length_table(read_study(store, "len")).set_index("variant")
    assert table.loc["learned", "2×"] == "n/a (no positions past max_seq_len)"
    assert table.loc["alibi", "2×"] == "n/a (not evaluated at this length)"
    assert not table.loc["rope", "2×"].startswith("n/a")
