"""Issue 22, execution side: claims registered before the runs, fresh confirmation seeds."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from ablate.cli import app, optional_values
from ablate.execution.confirm import claim_arms, confirm_seeds, run_confirm
from ablate.execution.runner import run_study
from ablate.store.registration import REGISTRATION_FILE, updated_registration
from ablate.study import load_study
from ablate.study.claims import claim_fingerprint

GRID = {"model.activation": ["relu", "gelu"], "model.norm_placement": ["pre", "post"]}
CLAIM = {
    "id": "relu-better",
    "text": "ReLU beats GELU with Pre-LN",
    "expect": "better",
    "a": {"model.activation": "relu"},
    "b": {"model.activation": "gelu"},
    "where": {"model.norm_placement": "pre"},
}
ARMS = ["activation=relu,norm_placement=pre", "activation=gelu,norm_placement=pre"]


@pytest.fixture
def study(make_study):
    """Four variants, seeds 0 and 1, one claim on two of them; 2-step runs."""

    def make(claims=(CLAIM,), grid=GRID):
        return make_study(
            "conf", base={"train.max_steps": 2}, grid=grid, seeds=[0, 1], claims=list(claims)
        )

    return make


def _edit_claims(path, claims):
    spec = yaml.safe_load(path.read_text())
    spec["claims"] = claims
    path.write_text(yaml.safe_dump(spec, sort_keys=False))


def _metas(store):
    out = {}
    for d in (store / "conf").iterdir():
        if (d / "run.yaml").is_file():
            meta = yaml.safe_load((d / "run.yaml").read_text())["meta"]
            summary = json.loads((d / "summary.json").read_text())
            out[d.name] = (meta["variant"], meta["seed"], meta.get("confirm"), summary)
    return out


def test_fingerprint_covers_what_a_claim_tests(study):
    (claim,) = load_study(study()).claims
    fp = claim_fingerprint(claim, 0.01)
    assert len(fp) == 64 and fp == claim_fingerprint(claim, 0.01)
    reworded = load_study(study([{**CLAIM, "text": "relu wins"}])).claims[0]
    assert claim_fingerprint(reworded, 0.01) == fp  # the wording is not the test
    for edit in (
        {"expect": "worse"},
        {"margin": 0.02},
        {"where": {"model.norm_placement": "post"}},
    ):
        edited = load_study(study([{**CLAIM, **edit}])).claims[0]
        assert claim_fingerprint(edited, 0.01) != fp, edit
    assert claim_fingerprint(claim, 0.02) != fp  # the study's margin is in force


def test_registration_keeps_the_history_of_edits_and_removals():
    rec = updated_registration(None, {"x": "f1", "y": "g1"}, None, now=10.0)
    assert rec == {
        "registered_at": 10.0,
        "first_run_at": None,
        "claims": {
            "x": {"fingerprint": "f1", "registered_at": 10.0},
            "y": {"fingerprint": "g1", "registered_at": 10.0},
        },
    }
    same = updated_registration(rec, {"x": "f1", "y": "g1"}, 11.0, now=20.0)
    assert same["first_run_at"] == 11.0 and same["claims"] == rec["claims"]
    edited = updated_registration(same, {"x": "f2", "z": "h1"}, 11.0, now=30.0)
    assert edited["registered_at"] == 10.0
    assert edited["claims"]["x"] == {
        "fingerprint": "f2",
        "registered_at": 30.0,
        "history": [{"fingerprint": "f1", "registered_at": 10.0}],
    }
    assert edited["claims"]["y"]["removed_at"] == 30.0
    assert edited["claims"]["z"] == {"fingerprint": "h1", "registered_at": 30.0}
    back = updated_registration(edited, {"x": "f2", "y": "g1", "z": "h1"}, 11.0, now=40.0)
    assert back["claims"]["y"]["registered_at"] == 40.0  # re-added: registered again, now
    assert back["claims"]["y"]["history"][0]["removed_at"] == 30.0


def test_claims_are_registered_before_the_first_run_and_edits_are_visible(study, tmp_path):
    path, store = study(), tmp_path / "runs"
    run_study(path, store=store, progress=False)
    reg_file = store / "conf" / REGISTRATION_FILE
    reg = json.loads(reg_file.read_text())
    entry = reg["claims"]["relu-better"]
    assert entry["registered_at"] == reg["registered_at"] < reg["first_run_at"]
    starts = [s["attempts"][0]["started"] for *_, s in _metas(store).values()]
    assert reg["first_run_at"] == min(starts)
    (claim,) = load_study(path).claims
    assert entry["fingerprint"] == claim_fingerprint(claim, 0.01)

    before = reg_file.read_bytes()
    run_study(path, store=store, progress=False)  # nothing changed: not rewritten
    assert reg_file.read_bytes() == before

    _edit_claims(path, [{**CLAIM, "expect": "worse"}])  # edited after the runs were seen
    run_study(path, store=store, progress=False)
    edited = json.loads(reg_file.read_text())["claims"]["relu-better"]
    assert edited["registered_at"] > reg["first_run_at"]
    assert edited["history"] == [entry]

    reg_file.unlink()  # a store with runs and no record (every study run before issue 22)
    run_study(path, store=store, progress=False)
    late = json.loads(reg_file.read_text())
    assert late["first_run_at"] == reg["first_run_at"]
    assert late["claims"]["relu-better"]["registered_at"] > late["first_run_at"]


def test_claim_arms_follow_a_b_and_where(study):
    best_of = {**CLAIM, "id": "best-of", "a": {"model.activation": ["relu", "gelu"]}, "where": {}}
    del best_of["b"]
    best_of["expect"] = "diverges"  # arm a only
    plan = load_study(study([CLAIM, best_of]))
    assert claim_arms(plan) == {
        "relu-better": ARMS,
        "best-of": [
            f"activation={a},norm_placement={n}"
            for a in GRID["model.activation"]
            for n in GRID["model.norm_placement"]
        ],
    }
    lr = {
        "id": "lr",
        "text": "an exponent",
        "expect": "equivalent",
        "metric": "lr_exponent",
        "value": 0.5,
        "where": {"model.activation": "relu"},
    }
    grid = {
        "data.batch_size": [4, 8],
        "optim.lr": [1e-3, 3e-3],
        "model.activation": ["relu", "gelu"],
    }
    plan = load_study(study([lr], grid=grid))  # a fitted exponent: the whole sweep under where
    relu = [r.variant for r in plan.runs if r.axes["model.activation"] == "relu"]
    assert claim_arms(plan)["lr"] == list(dict.fromkeys(relu)) and len(set(relu)) == 4


def test_confirm_trains_fresh_paired_seeds_for_claim_arms_only(study, tmp_path):
    path, store = study(), tmp_path / "runs"
    run_study(path, store=store, progress=False)  # the study's 8 runs, seeds 0 and 1
    results = run_confirm(path, 2, store=store, progress=False)
    assert sorted((r["variant"], r["seed"]) for r in results) == sorted(
        (v, s) for v in ARMS for s in (2, 3)
    )
    metas = _metas(store)
    confirm = {(v, s) for v, s, c, _ in metas.values() if c}
    assert confirm == {(v, s) for v in ARMS for s in (2, 3)}
    assert all(s.get("confirm") is True for v, seed, c, s in metas.values() if c)
    assert not any("confirm" in s for v, seed, c, s in metas.values() if not c)
    assert len(metas) == 12  # distinct run ids: the seed differs

    again = run_confirm(path, 2, store=store, progress=False)  # resumes the same seeds
    assert sorted(r["seed"] for r in again) == [2, 2, 3, 3] and len(_metas(store)) == 12
    run_confirm(path, 3, store=store, progress=False)  # one more: the next unused seed
    seeds = {(v, s) for v, s, c, _ in _metas(store).values() if c}
    assert seeds == {(v, s) for v in ARMS for s in (2, 3, 4)}


def test_confirm_skips_seeds_seen_outside_the_store(make_study, tmp_path):
    """``seen_seeds``: seeds looked at in an earlier store are never confirmation seeds."""
    path = make_study("conf", grid=GRID, seeds=[0, 1], seen_seeds=[2, 4], claims=[CLAIM], base={})
    plan = load_study(path)
    assert plan.seen_seeds == (2, 4)
    assert confirm_seeds(plan, tmp_path / "empty", 3) == [3, 5, 6]
    bad = make_study("bad", grid=GRID, seeds=[0, 1], seen_seeds=["x"], base={})
    res = CliRunner().invoke(app, ["plan", str(bad)])
    assert res.exit_code == 2 and "seen_seeds" in res.output.strip().splitlines()[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--confirm", "1"], "--confirm: must be at least 2 seeds"),
        (["--confirm", "x"], "--confirm: must be a whole number of seeds"),
        (["--until-decided", "--max-looks", "0"], "--max-looks: must be at least 1"),
        (["--until-decided", "--seeds-per-look", "two"], "--seeds-per-look: must be a whole"),
    ],
)
def test_bad_options_are_one_line_and_write_nothing(study, tmp_path, args, message):
    path, store = study(), tmp_path / "runs"
    res = CliRunner().invoke(app, ["run", str(path), "--store", str(store), *args])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.output
    assert not store.exists()


def test_confirm_needs_claims(study, tmp_path):
    path, store = study(claims=()), tmp_path / "runs"
    args = optional_values(["run", str(path), "--store", str(store), "--confirm"])
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "claims: the study has no claims to confirm" in res.output
    assert not store.exists()


def test_confirm_alone_means_three_seeds():
    assert optional_values(["run", "s.yaml", "--confirm"]) == ["run", "s.yaml", "--confirm", "3"]
    assert optional_values(["run", "--confirm", "s.yaml"]) == ["run", "--confirm", "3", "s.yaml"]
    assert optional_values(["run", "--confirm", "--until-decided", "s.yml"])[3] == "--until-decided"
    assert optional_values(["run", "s.yaml", "--confirm", "5"]) == [
        "run",
        "s.yaml",
        "--confirm",
        "5",
    ]
    assert optional_values(["run", "s.yaml", "--confirm", "x"])[-1] == "x"  # an error later
