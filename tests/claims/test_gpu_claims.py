"""Claims at another profile are confirmations: only the registered seeds of that profile's
registration decide them, not before every run of the design has finished, and a registration's
pilot comes from that profile's runs alone. A tiny study with a second profile named gpu stands
in for the GPU table (it trains on this CPU in seconds)."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
import yaml

from ablate.claims.checks import PENDING
from ablate.claims.outcomes import analyse
from ablate.claims.registration import build_registration, registration_path, write_registration
from ablate.config import ConfigError
from ablate.execution.confirm import Choices, register_study, run_confirm
from ablate.execution.runner import run_study
from ablate.report import build_reports
from ablate.results import read_study
from ablate.store import RunStore
from ablate.study import load_study as plan_study

CLAIM = {
    "id": "relu-beats-gelu",
    "text": "ReLU beats GELU",
    "expect": "better",
    "a": {"model.activation": "relu"},
    "b": {"model.activation": "gelu"},
}
PROFILES = {"cpu": {"seeds": [0, 1]}, "gpu": {"seeds": [5, 6], "train": {"max_steps": 3}}}


@pytest.fixture
def study(make_study, git):
    """The tiny study with cpu and gpu profiles, in a git checkout of its own."""
    path = make_study(
        "prof",
        base={"train.max_steps": 2},
        grid={"model.activation": ["relu", "gelu"]},
        claims=[CLAIM],
        profiles=PROFILES,
        default_profile="cpu",
    )
    git(path.parent, "init", "-q")
    return path


def _register(path, store, git, profile="gpu", n=None):
    """Register the profile's design (``n`` fresh seeds; None: 2, exploratory, since 2 cannot
    decide a claim) and commit it; returns the record."""
    choices = Choices(exploratory=n is None)
    reg = register_study(path, n or 2, store=store, profile=profile, choices=choices)
    git(path.parent, "add", str(reg), str(path))  # the study file too: --confirm needs both
    git(path.parent, "commit", "-qm", f"register {profile}")
    return yaml.safe_load(reg.read_text())


def _claim_row(path, store, out, **kw):
    """The claim as its report words it (claims.csv) and its line in provenance.md."""
    (md,) = build_reports([str(path)], store=store, out=out, quiet=True, **kw)
    (row,) = pd.read_csv(md.parent / "claims.csv").to_dict("records")
    prov = (md.parent / "provenance.md").read_text()
    line = next(x for x in prov.splitlines() if x.startswith(f"- **{CLAIM['id']}**"))
    return row, line


def test_the_profiles_own_seeds_are_exploratory_under_a_registration(study, tmp_path, git):
    """Registered seeds 7, 8; trained the profile's default seeds 5, 6 after the commit: the
    verdict is exploratory, however early the registration was committed."""
    store = tmp_path / "runs"
    record = _register(study, store, git)
    assert record["design"]["seeds"] == [7, 8]
    run_study(study, profile="gpu", store=store, progress=False)  # not --confirm
    row, line = _claim_row(study, store, tmp_path / "reports")
    assert row["outcome"] != "pending" and not row["confirmatory"]
    assert "but decided on runs that are not its confirmation runs" in row["registration"]
    assert "(fixed: 2 seeds per arm (7, 8))" in row["registration"] and "exploratory" in line
    assert "decided on the original seeds" in row["decided on"]


def test_a_partial_confirmation_is_pending_until_every_registered_run_finished(
    study, tmp_path, git
):
    store, out = tmp_path / "runs", tmp_path / "reports"
    _register(study, store, git, n=6)  # the fewest whose exact test can reach α=0.05
    run_confirm(study, profile="gpu", store=store, progress=False)
    runs = sorted((store / "prof").iterdir())
    assert len([r for r in runs if r.is_dir()]) == 12  # 2 arms x the 6 registered seeds
    aside = tmp_path / "aside"
    shutil.move(str(runs[0]), aside)  # as if the window ended before this run trained
    row, line = _claim_row(study, store, out)
    assert row["outcome"] == "pending" and not row["confirmatory"]
    assert "→ **pending, 11 of 12 runs**: 11 of 12 runs of its registered confirmation" in line
    assert "p=" not in line and "seeds needed" not in line.lower()  # no interim numbers
    index = (out / "claims.md").read_text()
    assert "1 pending" in index
    shutil.move(str(aside), runs[0])  # the next window finished it
    row, line = _claim_row(study, store, out)
    assert row["outcome"] != "pending" and row["confirmatory"], row
    assert "before the first confirmation run" in row["registration"]
    assert "decided on 6 confirmation seed(s) only" in line


def test_a_registrations_pilot_comes_from_its_own_profile(study, tmp_path, git):
    store = tmp_path / "runs"
    run_study(study, profile="cpu", store=store, progress=False)
    gpu = _register(study, store, git)
    (entry,) = gpu["claims"]
    assert entry["pilot"] == "no pilot: the store has no exploratory runs of prof at profile gpu"
    (entry,) = _register(study, store, git, "cpu")["claims"]
    assert entry["pilot"].startswith("on the exploratory seeds 0, 1: ")
    run_study(study, profile="gpu", store=store, progress=False)
    (entry,) = _register(study, store, git)["claims"]
    assert entry["pilot"].startswith("on the exploratory seeds 5, 6: ")  # never the cpu runs


def test_runs_of_one_profile_never_decide_another_profiles_claims(study, tmp_path):
    store = tmp_path / "runs"
    run_study(study, profile="cpu", store=store, progress=False)
    run_study(study, profile="gpu", store=store, progress=False)
    with pytest.raises(ConfigError, match="at profiles cpu, gpu: report one with --profile"):
        build_reports([str(study)], store=store, out=tmp_path / "r", quiet=True)
    for profile, seeds in (("cpu", {0, 1}), ("gpu", {5, 6})):
        row, _ = _claim_row(study, store, tmp_path / profile, profile=profile)
        assert "n=2 seeds" in row["numbers"], row
        results = pd.read_csv(tmp_path / profile / "prof" / "results.csv")
        assert set(results["seed"]) == seeds and len(results) == 4


def test_a_sequential_registration_runs_on_its_registered_seeds(study, tmp_path, git):
    from ablate.execution.decide import run_until_decided

    store = tmp_path / "runs"
    choices = Choices(looks=2, exploratory=True)
    reg = register_study(study, 2, store=store, profile="gpu", choices=choices)
    git(study.parent, "add", str(reg))
    git(study.parent, "commit", "-qm", "register a sequential design")
    with pytest.raises(ConfigError, match="run until-decided: a registered design trains its "):
        run_until_decided(study, profile="gpu", store=store, progress=False, max_looks=2)
    assert registration_path(study, "gpu") == reg and not store.exists()


NORM, POS = "model.norm_placement", "model.pos_encoding"


def test_a_pending_claim_counts_in_the_holm_family_but_never_decides(tmp_path, write_run, git):
    """Two claims registered together: the one whose confirmation finished is decided with
    Holm over both (the pending one counts with p = 1), the other is pending."""
    claims = [
        {"id": pos, "text": pos, "expect": "better", "a": {NORM: "pre"}, "b": {NORM: "post"}}
        | {"where": {POS: pos}}
        for pos in ("learned", "rope")
    ]
    spec = tmp_path / "g.yaml"
    grid = {NORM: ["post", "pre"], POS: ["learned", "rope"]}
    spec.write_text(yaml.safe_dump({"name": "g", "grid": grid, "seeds": [0, 1], "claims": claims}))
    design = {"kind": "fixed", "seeds": [6, 7, 8]}
    planned = plan_study(spec, check_data=False).claims
    write_registration(
        registration_path(spec), build_registration("g", None, planned, 0.01, design)
    )
    t0, store = 1_000_000_000, tmp_path / "runs"
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "registrations")
    git(tmp_path, "commit", "-qm", "register", when=t0)
    commit = git(tmp_path, "rev-parse", "HEAD")
    for norm, base in (("post", 1.9), ("pre", 1.6)):
        for pos in ("learned", "rope"):
            for seed in (0, 1, 6, 7, 8):
                unfinished = (norm, pos, seed) == ("pre", "rope", 8)
                status = "running" if unfinished else "completed"
                write_run(store, "g", {NORM: norm, POS: pos}, seed, status, base + 0.01 * seed)
    for run in RunStore(store).runs("g"):
        summary, data = run.read_summary(), run.read_run()
        if summary["seed"] >= 6:  # the registered seeds, trained after the commit
            run.write_summary({**summary, "confirm": True, "attempts": [{"started": t0 + 60}]})
            meta = {**data["meta"], "confirm": True, "registration": commit}
            run.write_run(data["config"], meta)
    _, (done, pending) = analyse(read_study(store, "g", spec))
    assert pending.outcome == PENDING and pending.pending == (5, 6) and pending.comparison is None
    assert done.t_outcome == "reproduces" and done.confirmation  # 3 seeds: the t-test alone
    assert done.outcome == "reproduces by t-test only"
    assert done.comparison.family == 2 and done.comparison.n_a == 3
    assert done.comparison.p_adj == pytest.approx(min(1.0, 2 * done.comparison.p))
