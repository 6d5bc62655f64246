"""Claims: validated at plan time, checked against the runs at report time; the LR-optimum fit."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats
from typer.testing import CliRunner

from ablate.claims import registration
from ablate.claims.fit import exponent, grad_slope, optimum_log_lr
from ablate.claims.outcomes import analyse
from ablate.claims.power import claim_seeds_needed
from ablate.claims.spec import claim_fingerprint
from ablate.claims.stats import holm
from ablate.cli import app
from ablate.config import ConfigError
from ablate.report import build_reports
from ablate.results import read_study
from ablate.store import RunStore
from ablate.study import load_study as plan_study

GRID = {"model.norm_placement": ["post", "pre"], "model.pos_encoding": ["learned", "rope"]}
CLAIMS = [
    {
        "id": "pre-wins",
        "text": "Pre-LN trains better",
        "expect": "better",
        "a": {"model.norm_placement": "pre"},
        "b": {"model.norm_placement": "post"},
        "where": {"model.pos_encoding": "rope"},
    },
    {
        "id": "post-wins",
        "text": "Post-LN trains better",
        "expect": "better",
        "a": {"model.norm_placement": "post"},
        "b": {"model.norm_placement": "pre"},
        "where": {"model.pos_encoding": "rope"},
    },
    {
        "id": "pos-tie",
        "text": "Encodings tie",
        "expect": "equivalent",
        "a": {"model.pos_encoding": "rope"},
        "b": {"model.pos_encoding": "learned"},
        "where": {"model.norm_placement": "pre"},
    },
    {
        "id": "post-diverges",
        "text": "Post-LN diverges",
        "expect": "diverges",
        "a": {"model.norm_placement": "post", "model.pos_encoding": "learned"},
    },
    {
        "id": "best-of",
        "text": "pre beats the best post",
        "expect": "better",
        "a": {"model.norm_placement": "pre", "model.pos_encoding": "learned"},
        "b": {"model.norm_placement": "post", "model.pos_encoding": ["learned", "rope"]},
    },
    {
        "id": "ffn-grad",
        "text": "Post-LN's FFN-output gradient grows toward the output at init, Pre-LN's not",
        "expect": "better",
        "metric": "ffn_grad_slope@init",
        "a": {"model.norm_placement": "pre"},
        "b": {"model.norm_placement": "post"},
        "where": {"model.pos_encoding": "learned"},
    },
    {
        "id": "vs-published",
        "text": "pre equals a published 1.6",
        "expect": "equivalent",
        "a": {"model.norm_placement": "pre", "model.pos_encoding": "learned"},
        "b": {"values": [1.598, 1.6, 1.603], "label": "paper"},
        "margin": 0.05,
    },
]


ART = {"artifact": "no.json"}


def study_yaml(path, claims=CLAIMS, **extra):
    path.write_text(
        yaml.safe_dump(
            {"name": "norm_pos", "grid": GRID, "seeds": [0, 1, 2], "claims": claims, **extra},
            sort_keys=False,
        )
    )
    return path


@pytest.fixture(scope="module")
def checked(tmp_path_factory, norm_pos_store):
    root = tmp_path_factory.mktemp("claims")
    store = norm_pos_store(root / "runs")
    spec = study_yaml(root / "norm_pos.yaml")
    study = read_study(store, "norm_pos", spec)
    return root, store, spec, study, {c.claim.id: c for c in analyse(study)[1]}


def test_claims_are_checked_against_the_runs(checked):
    *_, study, by_id = checked
    assert [c.id for c in study.claims] == [c["id"] for c in CLAIMS]
    # at 2-3 seeds the t-test decides, the exact tests cannot (floor 2/C(5,2) = 0.2 here)
    assert by_id["pre-wins"].t_outcome == "reproduces"
    assert by_id["pre-wins"].outcome == "reproduces by t-test only"
    assert by_id["post-wins"].outcome == "contradicted by t-test only"
    tie = by_id["pos-tie"]  # 0.004 apart with 0.02 seed noise at 3 vs 2 seeds: undecided
    # TOST within ±0.01 at 0.004 apart with 0.02 noise needs more than 200 seeds per arm
    assert tie.outcome == "inconclusive" and tie.seeds_needed.n is None
    assert tie.seeds_needed.unit == "seeds per arm"
    assert "not reachable: not reached by 200 seeds" in tie.seeds_needed.text()
    assert by_id["post-diverges"].outcome == "inconclusive"  # 1 of 3 seeds diverged
    best = by_id["best-of"]  # post-learned (1.89 over 2 finite seeds) vs post-rope (1.904)
    assert "pos_encoding=learned (best of learned/rope)" in best.comparison.label_b
    grad = by_id["ffn-grad"]  # post's norms grow with depth (slope > 0), pre's fall
    assert grad.t_outcome == "reproduces" and grad.comparison.mean_b > 0 > grad.comparison.mean_a
    assert grad.exact_outcome == "inconclusive" and grad.comparison.exact == "permutation"
    pub = by_id["vs-published"]  # pre-learned seeds 1.58/1.60/1.62 vs 1.600 ± 0.05
    assert pub.comparison.test == "Welch t" and pub.comparison.margin == 0.05


def test_holm_is_what_statsmodels_multipletests_computes(monkeypatch):
    """Against statsmodels' own Holm (``multipletests(method="holm")``), which ablate no longer
    calls: families of 1 to 40, ties, p-values near 1 (clipped) and NaNs (not counted)."""
    import gc

    from statsmodels.stats.multitest import multipletests

    # the collection it runs on every call (seconds here) changes no p-value
    monkeypatch.setattr(gc, "collect", lambda *a: 0)
    rng = np.random.default_rng(0)
    for k in (1, 2, 5, 40):
        for _ in range(20):
            p = rng.uniform(0, 1, k) ** 3
            p[rng.uniform(size=k) < 0.2] = p[0]  # ties
            p[rng.uniform(size=k) < 0.1] = np.nan
            ok = np.isfinite(p)
            want = np.full(k, np.nan)
            if ok.any():
                want[ok] = multipletests(p[ok], method="holm")[1]
            np.testing.assert_allclose(holm(list(p)), want, rtol=1e-12, atol=0)
    assert holm([]) == [] and math.isnan(holm([float("nan")])[0])


def test_claims_are_a_holm_family_of_their_own(checked):
    *_, study, by_id = checked
    comps, checks = analyse(study)
    # pre-wins and post-wins are one test (reversed arms); post-diverges has no p: it counts
    # with p = 1, so every family (t, TOST, exact, exact TOST) has the same 6 claims
    distinct = {"pre-wins", "pos-tie", "best-of", "ffn-grad", "vs-published"}
    for p, p_adj in (("p", "p_adj"), ("p_flip", "p_flip_adj"), ("p_tost", "p_tost_adj")):
        raw = [getattr(by_id[i].comparison, p) for i in sorted(distinct)]
        expected = dict(zip(sorted(distinct), holm([*raw, 1.0])[:5], strict=True))
        for cid in distinct:
            c = by_id[cid].comparison
            assert c.family == 6 and c.correction == "Holm"
            assert getattr(c, p_adj) == pytest.approx(expected[cid]), (cid, p)
    assert by_id["post-wins"].comparison.p_adj == by_id["pre-wins"].comparison.p_adj
    # the exploratory axis comparisons are their own family, under BH
    assert {c.correction for c in comps} == {"BH"} and {c.family for c in comps} == {4}


def test_report_lists_every_claim_with_its_outcome(checked, tmp_path):
    root, store, spec, *_ = checked
    (path,) = build_reports([str(spec)], store=store, out=tmp_path, quiet=True)
    section = (path.parent / "provenance.md").read_text().split("## Claims in full")[1]
    section = section.split("\n## ")[0]
    assert (
        "**pre-wins** (final_val_loss, expect better): Pre-LN trains better → **reproduces by "
        "t-test only**" in section
    )
    assert "→ **contradicted by t-test only**" in section
    assert "seeds to decide it: not reachable: not reached by 200 seeds" in section
    assert "decided on the original seeds (no confirmation runs)" in section
    assert (
        "registration not provable (no registration file (registrations/norm_pos.yaml) "
        "was committed" in section
    )
    assert "Holm-corrected over this study's 6 claim test(s) only" in section
    assert "post-diverges" in section and "diverged in 1/3 finished seeds" in section


@pytest.mark.parametrize(
    "claim, key, message",
    [
        (
            {"id": "x", "text": "t", "expect": "beter", "a": {}, "b": {}},
            "claims[0].expect",
            "unknown kind 'beter' (did you mean 'better'?)",
        ),
        (
            {
                "id": "x",
                "text": "t",
                "expect": "better",
                "a": {"model.norm": "pre"},
                "b": {"model.norm_placement": "post"},
            },
            "claims[0].a.model.norm",
            "not an axis of this study",
        ),
        (
            {
                "id": "x",
                "text": "t",
                "expect": "better",
                "a": {"model.norm_placement": "mid"},
                "b": {"model.norm_placement": "post"},
            },
            "claims[0].a.model.norm_placement",
            "'mid' is not a value of this axis; values: post, pre",
        ),
        (
            {"id": "x", "text": "t", "expect": "better", "a": {}, "b": {}, "metric": "loss@2x"},
            "claims[0].metric",
            "not evaluated by these runs",
        ),
        (
            {"id": "x", "text": "t", "expect": "better", "a": {}, "b": {}, "metric": "ppl"},
            "claims[0].metric",
            "unknown metric 'ppl'",
        ),
        (
            {"id": "x", "text": "t", "expect": "equivalent", "metric": "lr_exponent", "value": 1},
            "claims[0].metric",
            "needs grid axes data.batch_size and optim.lr",
        ),
        (
            {"id": "x", "text": "t", "expect": "better", "a": {}, "b": {}, "colour": 1},
            "claims[0].colour",
            "unknown key",
        ),
        (
            {"id": "x", "text": "t", "expect": "better", "a": {"model.norm_placement": "pre"}},
            "claims[0].b",
            "needs b:",
        ),
        (
            {"id": "x", "text": "t", "expect": "equivalent", "a": {}, "b": {"artifact": "no.json"}},
            "claims[0].b.key",
            "must name the artifact's list of values",
        ),
        (
            {"id": "x", "text": "t", "expect": "equivalent", "a": {}, "b": ART | {"key": "x"}},
            "claims[0].b.artifact",
            "no.json: not found",
        ),
        (
            {"id": "x", "text": "t", "expect": "equivalent", "a": {}, "b": ART | {"values": [1]}},
            "claims[0].b",
            "give either values or artifact",
        ),
    ],
)
def test_bad_claims_are_one_line_naming_file_and_key(tmp_path, claim, key, message):
    spec = study_yaml(tmp_path / "s.yaml", [claim])
    with pytest.raises(ConfigError) as err:
        plan_study(spec, check_data=False)
    assert str(err.value).startswith(f"{spec}: {key}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_published_arm_is_read_from_its_artifact(checked, tmp_path):
    """``b: {artifact, key}``: the values come from the committed file that produced them, the
    report names it, a key not in it is one line listing the lists it holds."""
    _, store, *_ = checked
    art = tmp_path / "reports" / "own.json"
    art.parent.mkdir()
    art.write_text(json.dumps({"seeds": [1, 2, 3], "full": [1.598, 1.6, 1.603], "what": "x"}))
    claim = dict(CLAIMS[-1], b={"artifact": "reports/own.json", "key": "full", "label": "paper"})
    spec = study_yaml(tmp_path / "s.yaml", [claim])
    (parsed,) = plan_study(spec, check_data=False).claims
    assert parsed.external == (1.598, 1.6, 1.603)
    assert parsed.external_source == "reports/own.json: full"
    (check,) = analyse(read_study(store, "norm_pos", spec))[1]
    assert check.comparison.label_b == "paper (reports/own.json: full)"
    spec = study_yaml(
        tmp_path / "s.yaml", [dict(claim, b={"artifact": "reports/own.json", "key": "f"})]
    )
    with pytest.raises(
        ConfigError, match=r"claims\[0\]\.b\.key: .* has no 'f'; lists in it: seeds, full"
    ):
        plan_study(spec, check_data=False)
    typed = analyse(read_study(store, "norm_pos", study_yaml(tmp_path / "t.yaml", [CLAIMS[-1]])))
    assert typed[1][0].comparison.label_b == "paper (typed into the study YAML, no artifact)"


def test_bad_margin_and_cli_plan_exits_2(tmp_path):
    spec = study_yaml(tmp_path / "s.yaml", [], equivalence_margin=-1)
    with pytest.raises(ConfigError, match="equivalence_margin: must be a positive number"):
        plan_study(spec, check_data=False)
    res = CliRunner().invoke(app, ["plan", str(spec)])
    assert res.exit_code == 2 and "equivalence_margin" in res.output


SHIPPED = sorted((Path(__file__).resolve().parents[2] / "studies").glob("*.yaml"))
# what a claim text must not say: a scale belongs to the report's computed scale line
SCALE_WORDS = re.compile(r"\b(CPU|GPU|scale|\d+ layers?|lr \d|small|profile)\b", re.IGNORECASE)


def test_shipped_studies_have_claims_whose_texts_name_no_scale():
    for path in SHIPPED:
        study = plan_study(path, check_data=False)
        assert study.claims, f"{path.name} has no claims"
        for profile in study.profiles:
            for claim in plan_study(path, profile, check_data=False, check_device=False).claims:
                assert not SCALE_WORDS.search(claim.text), (path.name, claim.id, claim.text)


def test_the_reference_claim_has_a_literature_arm_per_profile():
    """At the cpu profile nanoGPT's own run at its CPU settings (the committed artifact); at
    the gpu profile nanoGPT's own run of its GPU config (the committed GPU artifact) and, as a
    claim of that profile alone, the one number nanoGPT's README prints for that config, with
    its source, tested one-sample; both against the best validation loss (what it reports)."""
    path = next(p for p in SHIPPED if p.stem == "reference_nanogpt_cpu")
    (cpu,) = plan_study(path, "cpu", check_data=False).claims
    own, readme = plan_study(path, "gpu", check_data=False, check_device=False).claims
    assert cpu.external_source == "../reports/nanogpt_own.json: full_split_val_loss"
    assert len(cpu.external) == 3 and cpu.metric == "final_val_loss"
    assert own.id == cpu.id and own.text == cpu.text and own.metric == "best_val_loss"
    assert own.external_source == "../reports/gpu/nanogpt_own.json: best_val_loss"
    assert claim_fingerprint(cpu) != claim_fingerprint(own)
    assert readme.external == (1.4697,) and readme.metric == "best_val_loss"
    assert readme.external_source.startswith("typed in from nanoGPT README")
    assert "train_shakespeare_char" in readme.external_source
    assert registration.test_name(readme) == "one-sample t against the published value 1.4697"


PROFILED = {
    "cpu": {},
    "gpu": {
        "claims": {
            "vs-published": {
                "metric": "best_val_loss",
                "b": {"values": [1.61], "label": "gpu paper", "source": "its table 2"},
            }
        }
    },
}


def _as_profile(store, profile):
    """Mark every run of the synthetic store as planned at ``profile``."""
    for run in RunStore(store).runs("norm_pos"):
        data = run.read_run()
        run.write_run(data["config"], {**data["meta"], "profile": profile})


def test_a_profile_replaces_a_claims_literature_arm(tmp_path, norm_pos_store):
    spec = study_yaml(tmp_path / "s.yaml", [CLAIMS[-1]], profiles=PROFILED)
    plain = study_yaml(tmp_path / "plain.yaml", [CLAIMS[-1]])
    (cpu,) = plan_study(spec, "cpu", check_data=False).claims
    (gpu,) = plan_study(spec, "gpu", check_data=False).claims
    (before,) = plan_study(plain, check_data=False).claims
    assert cpu == before  # the cpu claim, and so its registration's fingerprint, is unchanged
    assert (gpu.metric, gpu.external) == ("best_val_loss", (1.61,))
    assert gpu.text == cpu.text and claim_fingerprint(gpu) != claim_fingerprint(cpu)

    store = norm_pos_store(tmp_path / "runs")
    _as_profile(store, "gpu")
    (check,) = analyse(read_study(store, "norm_pos", spec))[1]
    c = check.comparison
    assert c.test == "one-sample t" and c.n_b == c.n_a == 3  # one number: a fixed value
    assert c.label_b == "gpu paper (typed in from its table 2)"
    pre = [1.58, 1.6, 1.62]  # the synthetic pre/learned runs' losses (seeds 0-2)
    assert c.diff == pytest.approx(np.mean(pre) - 1.61)
    assert c.p == pytest.approx(stats.ttest_1samp(pre, 1.61).pvalue)
    # TOST within the claim's ±0.05, one-sample: both one-sided tests of the mean against it
    se = np.std(pre, ddof=1) / math.sqrt(3)
    low, high = stats.t.sf((c.diff + 0.05) / se, 2), stats.t.cdf((c.diff - 0.05) / se, 2)
    assert c.p_tost == pytest.approx(max(low, high)) and check.t_outcome == "reproduces"
    # its exact test: one-sided sign-flips of the 3 seeds against 1.61 ± 0.05, floor 1/8
    assert c.exact == "sign-flip" and c.p_flip_tost == 1 / 8
    assert check.outcome == "reproduces by t-test only"
    need = claim_seeds_needed(replace(c, family=1), check.claim)
    assert need.unit == "seeds of arm a (against one published value)"


def test_a_profile_adds_a_claim_of_its_own(tmp_path):
    """A claim id the study lacks, given whole (with its text), is a claim of that profile
    alone: the other profiles' claims, and so their registrations, are unchanged."""
    own = {
        "text": "pre equals the other paper's 1.61",
        "expect": "equivalent",
        "metric": "best_val_loss",
        "a": {"model.norm_placement": "pre", "model.pos_encoding": "learned"},
        "b": {"values": [1.61], "label": "gpu paper", "source": "its table 3"},
    }
    profiles = {"cpu": {}, "gpu": {"claims": {"vs-other-paper": own}}}
    spec = study_yaml(tmp_path / "s.yaml", [CLAIMS[-1]], profiles=profiles)
    (cpu,) = plan_study(spec, "cpu", check_data=False).claims
    published, added = plan_study(spec, "gpu", check_data=False).claims
    assert cpu == published  # the study's own claim, as at the cpu profile
    assert (added.id, added.metric, added.external) == ("vs-other-paper", "best_val_loss", (1.61,))


@pytest.mark.parametrize(
    ("replace", "key", "message"),
    [
        ({"nope": {"margin": 0.1}}, "profiles.gpu.claims.nope", "no claim with this id"),
        (
            {"own": {"text": "t", "expect": "better", "a": {"model.norm_placement": "pre"}}},
            "profiles.gpu.claims.own.b",
            "needs b:",
        ),
        ({"vs-published": {"text": "x"}}, "profiles.gpu.claims.vs-published.text", "unknown"),
        (
            {"vs-published": {"b": {"model.norm": "pre"}}},
            "profiles.gpu.claims.vs-published.b.model.norm",
            "not an axis of this study",
        ),
        (
            {"vs-published": {"metric": "ppl"}},
            "profiles.gpu.claims.vs-published.metric",
            "unknown metric 'ppl'",
        ),
        (
            {"vs-published": {"b": {"values": [], "label": "x"}}},
            "profiles.gpu.claims.vs-published.b.values",
            "must be a list of numbers",
        ),
        (
            {"vs-published": {"b": {"artifact": "a.json", "key": "k", "source": "x"}}},
            "profiles.gpu.claims.vs-published.b.source",
            "names where typed values are printed",
        ),
        (
            {"vs-published": {"margin": -1}},
            "profiles.gpu.claims.vs-published.margin",
            "must be a positive number",
        ),
    ],
)
def test_a_bad_profile_claim_is_one_line_naming_its_key(tmp_path, replace, key, message):
    profiles = {"cpu": {}, "gpu": {"claims": replace}}
    spec = study_yaml(tmp_path / "s.yaml", [CLAIMS[-1]], profiles=profiles)
    with pytest.raises(ConfigError) as err:
        plan_study(spec, "gpu", check_data=False)
    assert str(err.value).startswith(f"{spec}: {key}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


# --- the LR optimum and the exponent, by hand ---------------------------------------------------


def test_optimum_is_the_vertex_of_the_quadratic_in_log_lr():
    lrs = np.array([1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2])
    x_star = math.log10(3e-3)
    loss = 1.5 + 0.2 * (np.log10(lrs) - x_star) ** 2  # exactly quadratic: vertex recovered
    x, interior = optimum_log_lr(lrs, loss)
    assert interior and x == pytest.approx(x_star, abs=1e-9)
    x, interior = optimum_log_lr(lrs, 1.5 - np.log10(lrs))  # falls monotonically: edge
    assert not interior and math.isnan(x)
    loss[4] = np.nan  # a diverged run at the largest LR does not stop the fit
    assert optimum_log_lr(lrs, loss)[0] == pytest.approx(x_star, abs=1e-9)


def test_exponent_is_the_slope_in_log_log():
    b = np.array([8, 32, 128])
    assert exponent(b, np.log10(2e-3 * (b / 8) ** 0.5)) == pytest.approx(0.5)
    assert exponent(b, np.log10(1e-3 * b)) == pytest.approx(1.0)
    assert math.isnan(exponent(b, np.array([np.nan, np.nan, -3.0])))


def test_lr_exponent_claim_and_table(tmp_path, write_run):
    store = tmp_path / "runs"
    lrs = [1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2]
    for bs in (8, 32):
        star = math.log10(2e-3 * (bs / 8) ** 0.5)
        for lr in lrs:
            for seed in range(3):
                tilt = 0.0003 * (seed - 1) * (bs / 8) * math.log10(lr)  # moves each optimum
                final = 1.5 + 0.2 * (math.log10(lr) - star) ** 2 + tilt
                axes = {"data.batch_size": bs, "optim.lr": lr}
                write_run(store, "blr", axes, seed, "completed", final)
    spec = tmp_path / "blr.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "blr",
                "grid": {"data.batch_size": [8, 32], "optim.lr": lrs},
                "seeds": [0, 1, 2],
                "claims": [
                    {
                        "id": "sqrt",
                        "text": "square-root rule",
                        "expect": "equivalent",
                        "metric": "lr_exponent",
                        "value": 0.5,
                        "margin": 0.1,
                    },
                    {
                        "id": "linear",
                        "text": "linear rule",
                        "expect": "equivalent",
                        "metric": "lr_exponent",
                        "value": 1.0,
                        "margin": 0.1,
                    },
                ],
            }
        )
    )
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    md = path.read_text()
    prov = (path.parent / "provenance.md").read_text()
    # 3 seeds: the exact sign-flip test cannot reach α, so the t-test alone decides
    assert (
        "**sqrt** (lr_exponent, expect equivalent 0.5): square-root rule → **reproduces by "
        "t-test only**" in prov
    )
    assert (
        "**linear** (lr_exponent, expect equivalent 1): linear rule → **contradicted by t-test "
        "only**" in prov
    )
    sqrt = next(line for line in prov.splitlines() if line.startswith("- **sqrt**"))
    assert "against 0.5: one-sample t, p" in sqrt and "paired" not in sqrt
    assert "| 8 | 0.001, 0.002, 0.004, 0.008, 0.016 | 0.002 | yes (per seed: 3/3) | 0.002 [" in md


def test_lr_exponent_is_not_claimed_when_the_optimum_is_not_bracketed(tmp_path, write_run):
    store, lrs = tmp_path / "runs", [1e-3, 2e-3, 4e-3]
    for bs in (8, 32):
        for lr in lrs:
            for seed in range(2):  # loss falls with LR at batch 32: best LR at the edge
                final = 1.5 + (0.1 * (math.log10(lr) + 2.7) ** 2 if bs == 8 else -0.1 * lr * 100)
                write_run(
                    store, "nb", {"data.batch_size": bs, "optim.lr": lr}, seed, "completed", final
                )
    spec = tmp_path / "nb.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "nb",
                "grid": {"data.batch_size": [8, 32], "optim.lr": lrs},
                "seeds": [0, 1],
                "claims": [
                    {
                        "id": "sqrt",
                        "text": "sqrt",
                        "expect": "equivalent",
                        "metric": "lr_exponent",
                        "value": 0.5,
                        "margin": 0.1,
                    }
                ],
            }
        )
    )
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    md = path.read_text()
    prov = (path.parent / "provenance.md").read_text()
    assert "→ **not testable**" in prov and "not bracketed) at batch 32" in prov
    assert "| sqrt |" in md and "| not testable" in md  # the Answer's row
    assert "| 32 | 0.001, 0.002, 0.004 | 0.004 | NO: best LR at the edge |" in md


def test_grad_slope_is_the_log10_slope_over_layers():
    layers = np.arange(5)
    assert grad_slope(layers, 10 ** (0.1 * layers)) == pytest.approx(0.1)
    assert grad_slope(layers, 3 * 10 ** (-0.25 * layers)) == pytest.approx(-0.25)
    assert math.isnan(grad_slope(layers[:1], np.array([1.0])))


INTERSECTION = {
    "id": "slopes",
    "text": "Post-LN's slope > 0 and Pre-LN's <= 0",
    "expect": "all",
    "metric": "ffn_grad_slope@init",
    "all": [
        {"a": {"model.norm_placement": "post"}, "expect": "above", "value": 0},
        {"a": {"model.norm_placement": "pre"}, "expect": "below", "value": 0},
    ],
    "where": {"model.pos_encoding": "learned"},
}


def test_an_intersection_claim_is_the_largest_one_sided_p(tmp_path, norm_pos_store):
    """Both parts against scipy's one-sided one-sample t-tests on the per-run slopes."""
    store = norm_pos_store(tmp_path / "runs")
    flipped = {
        **INTERSECTION,
        "id": "flipped",
        "all": [
            {"a": {"model.norm_placement": "post"}, "expect": "below", "value": 0},
            {"a": {"model.norm_placement": "pre"}, "expect": "above", "value": 0},
        ],
    }
    spec = study_yaml(tmp_path / "norm_pos.yaml", [INTERSECTION, flipped])
    study = read_study(store, "norm_pos", spec)
    _, (check, back) = analyse(study)
    (path,) = build_reports([str(spec)], store=store, out=tmp_path / "r", quiet=True)
    table = pd.read_csv(path.parent / "results.csv")  # the per-run slopes are committed
    learned = table[(table["model.pos_encoding"] == "learned") & (table["status"] == "completed")]
    post = learned.loc[learned["model.norm_placement"] == "post", "ffn_grad_slope@init"]
    pre = learned.loc[learned["model.norm_placement"] == "pre", "ffn_grad_slope@init"]
    p_post = stats.ttest_1samp(post, 0, alternative="greater").pvalue
    p_pre = stats.ttest_1samp(pre, 0, alternative="less").pvalue
    assert [p.p for p in check.parts] == pytest.approx([p_post, p_pre])
    assert check.comparison.p == pytest.approx(max(p_post, p_pre))
    assert check.comparison.p_adj == pytest.approx(min(1.0, 2 * max(p_post, p_pre)), rel=1e-6)
    assert check.t_outcome == "reproduces" and back.t_outcome == "contradicted"
    # the exact one-sided sign-flip of each part, every slope on its side of 0: its floor,
    # 1/2^n (post: 2 finished seeds, pre: 3)
    assert [p.n for p in check.parts] == [2, 3] and (post > 0).all() and (pre < 0).all()
    assert [p.p_flip for p in check.parts] == pytest.approx([1 / 4, 1 / 8])
    assert check.outcome == "reproduces by t-test only"
    assert "intersection-union test" in (path.parent / "provenance.md").read_text()


def test_best_of_is_picked_on_exploratory_seeds_only(tmp_path, write_run):
    from ablate.claims.checks import build_comparisons

    store, act = tmp_path / "runs", "model.activation"
    finals = {"relu": (2.0, 2.3), "gelu": (2.1, 2.0), "swiglu": (1.9, 1.9)}  # (explore, confirm)
    for a, (explore, confirm) in finals.items():
        for seed in range(6):
            write_run(
                store,
                "b",
                {act: a},
                seed,
                "completed",
                (explore if seed < 3 else confirm) + 0.01 * seed,
            )
    for run in RunStore(store).runs("b"):
        summary = run.read_summary()
        if summary["seed"] >= 3:
            run.write_summary({**summary, "confirm": True})
    claim = {
        "id": "glu",
        "text": "t",
        "expect": "better",
        "a": {act: "swiglu"},
        "b": {act: ["relu", "gelu"]},
    }
    spec = tmp_path / "b.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"name": "b", "grid": {act: list(finals)}, "seeds": [0, 1, 2], "claims": [claim]}
        )
    )
    study = read_study(store, "b", spec)
    (check,) = build_comparisons(study, study.claims, 0.01)
    # relu is best on the exploratory seeds 0-2, gelu on the confirmation seeds 3-5
    assert check.confirmation and "activation=relu (best of relu/gelu)" in check.comparison.label_b
