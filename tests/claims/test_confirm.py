"""Registration in a committed file, fresh confirmation seeds fixed by it."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from ablate.claims.arms import claim_arms
from ablate.claims.registration import git_versions, registration_path
from ablate.claims.spec import claim_fingerprint
from ablate.cli import app
from ablate.execution.confirm import confirm_seeds, run_confirm
from ablate.execution.runner import run_study
from ablate.study import load_study

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


def _confirm_cli(path, store, *extra):
    return CliRunner().invoke(app, ["run", "confirm", str(path), "--store", str(store), *extra])


def _tags(store, results):
    run_yamls = [store / "conf" / r["run_id"] / "run.yaml" for r in results]
    return {yaml.safe_load(p.read_text())["meta"].get("registration") for p in run_yamls}


def test_confirm_needs_a_committed_matching_registration(study, tmp_path, git):
    path, store = study(), tmp_path / "runs"
    git(path.parent, "init", "-q")
    run_study(path, store=store, progress=False)  # seeds 0 and 1, exploratory
    res = _confirm_cli(path, store)
    assert res.exit_code == 2 and "no registration: run `ablate register" in res.output
    assert len(res.output.strip().splitlines()) == 1

    # two seeds cannot decide a claim; registered as exploratory they may confirm nothing
    register = ["register", str(path), "--seeds", "2", "--store", str(store)]
    res = CliRunner().invoke(app, register)
    assert res.exit_code == 2 and "it needs at least 6" in res.output
    res = CliRunner().invoke(app, [*register, "--exploratory"])
    assert res.exit_code == 0, res.output
    reg_file = registration_path(path)
    reg = yaml.safe_load(reg_file.read_text())
    assert reg["design"] == {"kind": "fixed", "seeds": [2, 3], "arms": ARMS}
    (entry,) = reg["claims"]
    assert entry["fingerprint"] == claim_fingerprint(load_study(path).claims[0], 0.01)
    assert entry["test"].startswith("paired t") and "no stated source" in entry["margin_source"]

    res = _confirm_cli(path, store)  # written, not committed
    assert res.exit_code == 2 and "is not committed" in res.output
    git(path.parent, "add", str(reg_file))
    git(path.parent, "commit", "-qm", "register")
    commit = git(path.parent, "rev-parse", "HEAD")
    assert [v.commit for v in git_versions(reg_file)] == [commit]
    before = sorted(p.name for p in (store / "conf").iterdir())
    res = _confirm_cli(path, store)  # the registration is committed, the study file is not
    assert res.exit_code == 2 and "conf.yaml is not committed" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert sorted(p.name for p in (store / "conf").iterdir()) == before  # nothing trained
    git(path.parent, "add", str(path))
    git(path.parent, "commit", "-qm", "the study")
    res = _confirm_cli(path, store, "--seeds", "3")  # another design than the registered one
    assert res.exit_code == 2 and "registers 2 seeds, not 3" in res.output

    for a, b in ((reg_file.name, "moved.yaml"), ("moved.yaml", reg_file.name)):  # no new content
        git(reg_file.parent, "mv", a, b)
        git(reg_file.parent, "commit", "-qm", f"move {a}")
    assert len(git_versions(reg_file)) == 3
    results = run_confirm(path, store=store, progress=False)
    assert sorted((r["variant"], r["seed"]) for r in results) == sorted(
        (v, s) for v in ARMS for s in (2, 3)
    )
    assert _tags(store, results) == {commit}  # the commit that registered this content

    _edit_claims(path, [{**CLAIM, "expect": "worse"}])  # edited after registration
    res = _confirm_cli(path, store)
    assert res.exit_code == 2 and "relu-better changed since registration" in res.output
    _edit_claims(path, [{**CLAIM, "text": "ReLU wins"}])  # a new text is a new claim too
    res = _confirm_cli(path, store)
    assert res.exit_code == 2 and "the text of claim(s) relu-better changed" in res.output
    reg_file.write_text(reg_file.read_text() + "# edited\n")
    _edit_claims(path, [CLAIM])
    res = _confirm_cli(path, store)
    assert res.exit_code == 2 and "has changes not committed" in res.output


def test_unregistered_confirmation_is_tagged(study, tmp_path):
    path, store = study(), tmp_path / "runs"
    run_study(path, store=store, progress=False)
    results = run_confirm(path, 2, store=store, progress=False, unregistered=True)
    assert _tags(store, results) == {"unregistered"}


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
    results = run_confirm(path, 2, store=store, progress=False, unregistered=True)
    assert sorted((r["variant"], r["seed"]) for r in results) == sorted(
        (v, s) for v in ARMS for s in (2, 3)
    )
    metas = _metas(store)
    confirm = {(v, s) for v, s, c, _ in metas.values() if c}
    assert confirm == {(v, s) for v in ARMS for s in (2, 3)}
    assert all(s.get("confirm") is True for v, seed, c, s in metas.values() if c)
    assert not any("confirm" in s for v, seed, c, s in metas.values() if not c)
    assert len(metas) == 12  # distinct run ids: the seed differs

    again = run_confirm(path, 2, store=store, progress=False, unregistered=True)  # resumes
    assert sorted(r["seed"] for r in again) == [2, 2, 3, 3] and len(_metas(store)) == 12
    run_confirm(path, 3, store=store, progress=False, unregistered=True)  # the next unused
    seeds = {(v, s) for v, s, c, _ in _metas(store).values() if c}
    assert seeds == {(v, s) for v in ARMS for s in (2, 3, 4)}


def test_plan_confirm_lists_and_times_the_runs_run_confirm_trains(study, tmp_path):
    """`ablate plan --confirm N` shows the confirmation before it is paid for: exactly the
    runs `ablate run confirm N` then trains (same ids), their seeds and their time."""
    path, store = study(), tmp_path / "runs"
    run_study(path, store=store, progress=False)  # seeds 0 and 1
    args = ["plan", str(path), "--store", str(store), "--confirm", "--seeds", "2", "--unregistered"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    rows = [line.split("│") for line in res.output.splitlines() if ",seed=" in line]
    planned = {(cells[2].strip(), cells[3].strip()) for cells in rows}  # name, run id
    text = " ".join(res.output.split())
    assert "seeds 2, 3 for each of the 2 claim arm(s), under no registration" in text
    assert "for the 4 runs to train" in text  # the confirmation's time, not the study's
    results = run_confirm(path, 2, store=store, progress=False, unregistered=True)
    assert planned == {(r["name"], r["run_id"]) for r in results}
    assert {name for name, _ in planned} == {f"{v},seed={s}" for v in ARMS for s in (2, 3)}


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
        (["confirm", "--seeds", "1"], "--seeds: must be at least 2 seeds"),
        (["confirm", "--seeds", "x"], "--seeds: must be a whole number of seeds"),
        (["until-decided", "--max-looks", "0"], "--max-looks: must be at least 1"),
        (["until-decided", "--seeds-per-look", "two"], "--seeds-per-look: must be a whole"),
    ],
)
def test_bad_options_are_one_line_and_write_nothing(study, tmp_path, args, message):
    path, store = study(), tmp_path / "runs"
    mode, options = args[0], args[1:]
    res = CliRunner().invoke(app, ["run", mode, str(path), "--store", str(store), *options])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.output
    assert not store.exists()


def test_confirm_needs_claims(study, tmp_path):
    path, store = study(claims=()), tmp_path / "runs"
    res = CliRunner().invoke(app, ["run", "confirm", str(path), "--store", str(store)])
    assert res.exit_code == 2 and "claims: the study has no claims to confirm" in res.output
    assert not store.exists()


def test_confirm_is_a_flag_and_seeds_count_its_seeds(study, tmp_path):
    """``plan --confirm`` alone (here before another option) is what ``run confirm`` trains:
    without a registration, 3 fresh seeds; ``--seeds N`` without ``--confirm`` is one line."""
    path, store = study(), tmp_path / "runs"
    args = ["plan", str(path), "--confirm", "--unregistered", "--store", str(store)]
    res = CliRunner().invoke(app, [*args, "--no-estimate"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "seeds 2, 3, 4 for each of the 2 claim arm(s)" in " ".join(res.output.split())
    for command in (["plan"], ["run", "until-decided"]):
        res = CliRunner().invoke(app, [*command, str(path), "--seeds", "3", "--store", str(store)])
        assert res.exit_code == 2 and res.output.strip().splitlines() == [
            "error: --seeds: counts confirmation seeds: add --confirm"
        ], res.output
    assert not store.exists()


def test_each_profile_registers_in_a_file_of_its_own(study, tmp_path, git):
    """A gpu profile's runs are new data: their design is registered in `<study>.gpu.yaml`
    beside the cpu profile's `<study>.yaml`, and a confirmation checks its own profile's."""
    path = study()
    spec = yaml.safe_load(path.read_text())
    spec["profiles"] = {"cpu": {}, "gpu": {"train": {"max_steps": 3}}}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert registration_path(path).name == registration_path(path, "cpu").name == "conf.yaml"
    assert registration_path(path, "gpu") == path.parent / "registrations" / "conf.gpu.yaml"
    store = tmp_path / "runs"
    git(path.parent, "init", "-q")
    register = ["register", str(path), "--seeds", "2", "--exploratory", "--store", str(store)]
    assert CliRunner().invoke(app, [*register, "--profile", "cpu"]).exit_code == 0
    git(path.parent, "add", "registrations")
    git(path.parent, "commit", "-qm", "register cpu")
    res = _confirm_cli(path, store, "--profile", "gpu")  # the cpu one does not count
    assert res.exit_code == 2 and "conf.gpu.yaml" in res.output and "no registration" in res.output
    # nothing trains, so a profile for a device this machine lacks registers here too
    res = CliRunner().invoke(app, [*register, "--profile", "gpu", "-s", "train.accelerator=gpu"])
    assert res.exit_code == 0, res.output
    gpu = yaml.safe_load(registration_path(path, "gpu").read_text())
    assert gpu["profile"] == "gpu" and gpu["design"]["kind"] == "fixed"
    assert yaml.safe_load(registration_path(path).read_text())["profile"] == "cpu"
