"""A study kept outside ``studies/``, in a git repository of its own, with a plugin: its
registration pins what defines the runs, ``ablate run confirm`` refuses uncommitted or changed
inputs in one line, and the report proves the order by name, by path and with no name (what
``make report`` runs) from any directory."""

from __future__ import annotations

import pandas as pd
import yaml
from typer.testing import CliRunner

from ablate.cli import app
from ablate.store.provenance import code_state

PLUGIN = """
import torch.nn as nn
import torch.nn.functional as F

import ablate


@ablate.register("activation", "{name}")
class SquaredReLU(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.ff_dim, bias=cfg.bias)
        self.w2 = nn.Linear(cfg.ff_dim, cfg.d_model, bias=cfg.bias)

    def forward(self, x):
        return self.w2(F.relu(self.w1(x)).square())
"""
CLAIM = {
    "id": "relu2-beats-relu",
    "text": "squared ReLU beats ReLU",
    "expect": "better",
    "b": {"model.activation": "relu"},
}


def _cli(*args):
    """The command line as a user types it (``run confirm``: the registered seeds)."""
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.output


def _run_ids(store):
    return sorted(p.name for p in (store / "mine").iterdir() if (p / "run.yaml").is_file())


def _repo(root, tiny_studies, git, act="relu2proof"):
    """``research/exp/``: the study, a plugin registering activation ``act``, the corpus (one
    plugin name per test: a process registers a name once)."""
    repo = root / "research"
    (repo / "exp").mkdir(parents=True)
    git(repo, "init", "-q")
    corpus = tiny_studies.corpus(repo / "exp" / "corpus.txt")
    (repo / "exp" / "act.py").write_text(PLUGIN.replace("{name}", act))
    study = tiny_studies.study(
        repo / "exp",
        tiny_studies.base(max_steps=2),
        corpus,
        name="mine",
        grid={"model.activation": ["relu", act]},
        seeds=[0, 1],
        claims=[{**CLAIM, "a": {"model.activation": act}}],
        plugins=["./act.py"],
    )
    return repo, study


def test_a_study_in_its_own_repository_keeps_its_proof_everywhere(
    tmp_path, tiny_studies, git, monkeypatch, clean_registry
):
    repo, study = _repo(tmp_path, tiny_studies, git)
    store = tmp_path / "runs"
    git(repo, "add", "exp")
    git(repo, "commit", "-qm", "the study, its plugin and data")
    code, out = _cli("run", study, "--store", store, "--no-progress")
    assert code == 0, out
    code, out = _cli("register", study, "--seeds", "6", "--store", store)  # 2/2^6 < 0.05
    assert code == 0, out
    reg = repo / "exp" / "registrations" / "mine.yaml"
    pinned = yaml.safe_load(reg.read_text())["inputs"]
    assert pinned["study"]["file"] == "exp/mine.yaml"
    assert [p["file"] for p in pinned["plugins"]] == ["exp/act.py"]
    assert pinned["runs"]["count"] == 12 and len(pinned["digest"]) == 64  # 2 arms x seeds 2-7
    git(repo, "add", str(reg))
    git(repo, "commit", "-qm", "register")
    code, out = _cli("run", "confirm", study, "--store", store, "--no-progress")
    assert code == 0, out

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no studies/ here: the runs recorded where the study lives
    for name, args in (("name", ["mine"]), ("path", [study]), ("make", [])):
        code, out = _cli("report", *args, "--store", store, "--out", tmp_path / name)
        assert code == 0, out
        (row,) = pd.read_csv(tmp_path / name / "mine" / "claims.csv").to_dict("records")
        assert row["confirmatory"] is True, (name, row["registration"])
        assert "order proven by git" in row["registration"]
        assert "inputs as registered: exp/mine.yaml at the runs' commit" in row["registration"]
        table = pd.read_csv(tmp_path / name / "mine" / "results.csv")
        confirm = table[table["confirm"] == True]  # noqa: E712 - the csv's booleans
        # the study's repository was clean; git_dirty is ablate's own checkout, shown as such
        assert (confirm["study_dirty"] == False).all()  # noqa: E712
        assert set(confirm["study_commit"]) == {git(repo, "rev-parse", "HEAD")}
        assert {"git_commit", "git_dirty", "study_file"} <= set(table.columns)

    # a plugin changed and not committed: refused in one line, nothing trained
    before = _run_ids(store)
    (repo / "exp" / "act.py").write_text(PLUGIN.replace("{name}", "relu2proof") + "# tuned\n")
    code, out = _cli("run", "confirm", study, "--store", store, "--no-progress")
    assert code == 2 and "act.py has changes not committed" in out
    assert len(out.strip().splitlines()) == 1 and _run_ids(store) == before
    # committed, it is still not the registered plugin: register again
    git(repo, "commit", "-qam", "tune the plugin")
    code, out = _cli("run", "confirm", study, "--store", store, "--no-progress")
    assert code == 2 and "plugin exp/act.py differs from the registered one" in out
    assert len(out.strip().splitlines()) == 1 and _run_ids(store) == before


def test_a_study_never_committed_is_refused(tmp_path, tiny_studies, git, clean_registry):
    repo, study = _repo(tmp_path, tiny_studies, git, act="relu2never")
    store = tmp_path / "runs"
    code, out = _cli("register", study, "--seeds", "2", "--exploratory", "--store", store)
    assert code == 0, out
    git(repo, "add", "exp/registrations")  # the registration alone, as the newcomer did
    git(repo, "commit", "-qm", "register")
    code, out = _cli("run", "confirm", study, "--store", store, "--no-progress")
    assert code == 2 and "mine.yaml is not committed" in out
    assert len(out.strip().splitlines()) == 1 and not (store / "mine").exists()


def test_reports_and_studies_never_make_a_run_dirty(tmp_path, git):
    """``git_dirty`` is ablate's code: a rewritten report or study file leaves it clean."""
    for folder in ("ablate", "reports", "studies"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "f.txt").write_text("x\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "c")
    for folder in ("reports", "studies"):
        (tmp_path / folder / "f.txt").write_text("changed\n")
    assert code_state(tmp_path)["git_dirty"] is False
    (tmp_path / "ablate" / "f.txt").write_text("changed\n")
    assert code_state(tmp_path)["git_dirty"] is True


def test_a_registration_from_before_pins_keeps_its_meaning(
    tmp_path, tiny_studies, git, clean_registry
):
    """A registration without ``inputs:`` (as every one before pins, e.g. reference's gpu one)
    pinned its claims and design: ``run confirm`` trains under it and the report confirms on it,
    saying that the study file changed after it was committed, without undoing it. Without
    ``attempts:`` and the claims' shares either (the format before α budgets) its one attempt
    spends the claim's whole α."""
    repo, study = _repo(tmp_path, tiny_studies, git, act="relu2old")
    store = tmp_path / "runs"
    git(repo, "add", "exp")
    git(repo, "commit", "-qm", "the study, its plugin and data")
    code, out = _cli("register", study, "--seeds", "6", "--store", store)
    assert code == 0, out
    reg = repo / "exp" / "registrations" / "mine.yaml"
    record = yaml.safe_load(reg.read_text())
    del record["inputs"], record["attempts"]  # the format before pins and budgets
    for entry in record["claims"]:
        del entry["attempt"], entry["alpha"], entry["budget"]
    reg.write_text(yaml.safe_dump(record, sort_keys=False, allow_unicode=True))
    git(repo, "add", str(reg))
    git(repo, "commit", "-qm", "register")
    reg_commit = git(repo, "rev-parse", "HEAD")
    text = study.read_text().replace("a tiny test study", "a tiny test study, described")
    study.write_text(text)  # the claims and design as registered; the study file not
    git(repo, "commit", "-qam", "describe the study")
    code, out = _cli("run", "confirm", study, "--store", store, "--no-progress")
    assert code == 0, out
    code, out = _cli("report", study, "--store", store, "--out", tmp_path / "out")
    assert code == 0, out
    (row,) = pd.read_csv(tmp_path / "out" / "mine" / "claims.csv").to_dict("records")
    assert row["confirmatory"] is True, row["registration"]
    assert "digest not pinned" in row["registration"]
    assert "decided at its α=0.05 (share 1 of the claim's budget)" in row["registration"]
    assert "from before α budgets" in row["alpha budget"]
    assert f"the study file changed from {reg_commit[:7]}" in row["registration"]
