"""Runs know their data and code: content-keyed ids, resume mismatches, stale runs, samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import ConfigError, build_config
from ablate.store import RunDir, provenance
from ablate.store.provenance import (
    PACKAGE,
    byte_fingerprint,
    code_fingerprint,
    fingerprint_at,
    is_stale,
    package_sources,
    process_started,
    source_fingerprint,
    stale_note,
)
from ablate.training.finish import ResumeMismatch, check_resume

TEXT = "".join(f"Row {i}: some words and more words, line {i % 11}.\n" for i in range(400))
TINY = [
    "train.max_steps=2",
    "train.eval_interval=2",
    "train.eval_batches=1",
    "train.final_eval_batches=2",
    "tracking.wandb=false",
    "model.d_model=16",
    "model.n_layers=1",
    "model.n_heads=2",
    "data.seq_len=16",
    "data.batch_size=4",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny run on a local text file, trained through the CLI."""
    root = tmp_path_factory.mktemp("prov")
    mp = pytest.MonkeyPatch()
    mp.setenv("ABLATE_CACHE_DIR", str(root / "cache"))
    corpus = root / "corpus.txt"
    corpus.write_text(TEXT)
    args = ["train", "--store", str(root / "runs"), "--no-progress"]
    args += [x for s in [*TINY, f"data.dataset={corpus}"] for x in ("-s", s)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    (run,) = (root / "runs" / "train").iterdir()
    yield {"root": root, "corpus": corpus, "run": RunDir(run), "args": args}
    mp.undo()


def test_run_yaml_records_code_and_data(trained):
    meta = trained["run"].read_run()["meta"]
    assert meta["ablate_version"] == __import__("ablate").__version__
    assert meta["code_fingerprint"] == code_fingerprint()
    from ablate.data.datasets import sha256_file

    assert meta["data_key"] == f"sha256:{sha256_file(trained['corpus'])}"
    if (PACKAGE.parent / ".git").exists():
        assert len(meta["git_commit"]) == 40 and isinstance(meta["git_dirty"], bool)


def test_edited_file_makes_a_new_run_and_keeps_the_old(trained, tmp_path):
    run = trained["run"]
    before = run.summary_file.read_text()
    corpus = trained["corpus"]
    original = corpus.read_text()
    try:
        corpus.write_text(original + "One more line.\n")
        res = CliRunner().invoke(app, trained["args"])
        assert res.exit_code == 0, res.output
        runs = sorted(p.name for p in run.path.parent.iterdir())
        assert len(runs) == 2 and run.run_id in runs
        assert run.summary_file.read_text() == before  # the old run is untouched
    finally:
        corpus.write_text(original)
        for p in run.path.parent.iterdir():
            if p.name != run.run_id:
                import shutil

                shutil.rmtree(p)


def test_tokenizer_mismatch_on_resume_is_exit_2(trained):
    run = trained["run"]
    summary = json.loads(run.summary_file.read_text())
    doctored = {**summary, "status": "running", "tokenizer_sha256": "0" * 16}
    run.write_summary(doctored)
    try:
        res = CliRunner().invoke(app, trained["args"])
        assert res.exit_code == 2
        assert "tokenizer differs" in res.output and res.output.count("\n") == 1
        assert run.read_summary() == doctored  # nothing rewritten: not 'failed', no new attempt
    finally:
        run.write_summary(summary)


def test_vocab_mismatch_names_both_sizes(trained):
    from ablate.data import LMDataModule

    cfg = build_config(
        {"data.dataset": str(trained["corpus"]), "data.seq_len": 16, "data.batch_size": 4}
    )
    dm = LMDataModule(cfg.data).prepare()
    ckpt = {"state_dict": {"model.tok_emb.weight": torch.zeros(dm.vocab_size + 3, 16)}}
    with pytest.raises(
        ResumeMismatch,
        match=rf"vocabulary of {dm.vocab_size + 3} tokens .* "
        rf"gives {dm.vocab_size}",
    ):
        check_resume(ckpt, dm, {}, trained["run"])
    assert issubclass(ResumeMismatch, ConfigError)


def test_stale_runs_are_flagged_and_rerun(tmp_path, monkeypatch):
    from ablate.execution.runner import run_study
    from ablate.execution.tables import store_status

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT)
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump({"name": "s", "base": {"data.dataset": str(corpus)}}))
    store = tmp_path / "runs"
    (first,) = run_study(study, overrides=TINY, store=store, progress=False)
    run = RunDir(store / "s" / first["run_id"])
    assert not is_stale(run) and stale_note(store / "s") == ""
    data = yaml.safe_load(run.run_file.read_text())
    data["meta"]["code_fingerprint"] = "ast:0123456789abcdef"  # made by other model code
    run.run_file.write_text(yaml.safe_dump(data))
    assert is_stale(run)
    assert "1 run was made by different model/training code" in stale_note(store / "s")
    store_status(store)  # prints the flag; must not fail
    # a plain run keeps it; --rerun-stale moves it aside and trains it again
    (again,) = run_study(study, overrides=TINY, store=store, progress=False)
    assert is_stale(run)
    (redone,) = run_study(study, overrides=TINY, store=store, progress=False, rerun_stale=True)
    assert redone["status"] == "completed" and not is_stale(run)
    (moved,) = (store / "s" / ".stale").iterdir()
    assert yaml.safe_load((moved / "run.yaml").read_text())["meta"]["code_fingerprint"] == (
        "ast:0123456789abcdef"
    )


# --- the code fingerprint: behaviour, not bytes -------------------------------------------------

SOURCE = '''"""A module."""

SCALE = 0.02
"""The init std."""


def init(w, n: int = 2):
    """Scale ``w``."""
    return w * SCALE / n
'''
SAME = '''"""The module, its docstring reworded at length."""
# a comment the old fingerprint would have hashed
SCALE = 0.02  # trailing comment


def init(
    w,
    n: int = 2,
):
    """Scale ``w`` (reworded)."""
    # why: a comment in the body
    return (w * SCALE) / n
'''


def test_docstrings_comments_and_formatting_keep_the_fingerprint():
    base = source_fingerprint({"model/m.py": SOURCE})
    assert base.startswith("ast:") and len(base) == 4 + 16
    assert source_fingerprint({"model/m.py": SAME}) == base
    # a changed constant, statement, default or name is other behaviour
    for edit in (
        SOURCE.replace("0.02", "0.01"),
        SOURCE.replace("/ n", "/ (n + 1)"),
        SOURCE.replace("n: int = 2", "n: int = 3"),
        SOURCE.replace("return w", "w = w.float()\n    return w"),
        SOURCE.replace("SCALE", "STD"),
    ):
        assert source_fingerprint({"model/m.py": edit}) != base
    # the file's path is part of it: the same code in another file is other code
    assert source_fingerprint({"model/n.py": SOURCE}) != base


def test_a_docstring_edit_keeps_the_packages_fingerprint_a_constant_does_not(tmp_path):
    """The real CODE_FILES copied and edited: a docstring (and a comment) leave the fingerprint
    as it is, where the old byte hash changed; one constant changes it."""
    sources = package_sources()
    assert "model/transformer.py" in sources and "training/adamw.py" in sources
    assert source_fingerprint(sources) == code_fingerprint()
    text = sources["model/transformer.py"].decode()
    first = text.index('"""') + 3
    reworded = text[:first] + "Reworded. " + text[first:] + "\n# a closing comment\n"
    edited = {**sources, "model/transformer.py": reworded.encode()}
    assert source_fingerprint(edited) == code_fingerprint()
    assert edited != sources  # the bytes differ: the byte fingerprint would have moved
    assert "math.log(10000.0)" in text  # the sinusoidal encoding's base
    changed = text.replace("math.log(10000.0)", "math.log(10001.0)")
    assert source_fingerprint({**sources, "model/transformer.py": changed.encode()}) != (
        code_fingerprint()
    )


@pytest.fixture
def code_history(tmp_path, git):
    """A repository whose package ``pkg`` went through three commits: the code, a docstring
    edit, a changed constant; returns (package folder, the three commits)."""
    pkg = tmp_path / "repo" / "pkg"
    (pkg / "model").mkdir(parents=True)
    git(tmp_path / "repo", "init", "-q")
    commits = []
    for text in (SOURCE, SAME, SOURCE.replace("0.02", "0.01")):
        (pkg / "model" / "m.py").write_text(text)
        (pkg / "model" / "notes.txt").write_text(text)  # not a CODE_FILES pattern
        git(tmp_path / "repo", "add", "-A")
        git(tmp_path / "repo", "commit", "-q", "-m", "step")
        commits.append(git(tmp_path / "repo", "rev-parse", "HEAD"))
    return pkg, commits


def test_the_fingerprint_at_a_commit_is_rebuilt_from_git(code_history):
    pkg, (code, docstring, constant) = code_history
    want = source_fingerprint({"model/m.py": SOURCE})
    assert fingerprint_at(code, pkg) == want == fingerprint_at(docstring, pkg)
    assert fingerprint_at(constant, pkg) != want
    assert fingerprint_at("0" * 40, pkg) is None  # a commit this clone lacks


def _run_with(folder, meta: dict) -> RunDir:
    folder.mkdir(parents=True)
    (folder / "run.yaml").write_text(yaml.safe_dump({"meta": meta, "config": {}}))
    return RunDir(folder)


def test_a_run_with_a_byte_fingerprint_is_judged_by_its_commits_code(
    code_history, tmp_path, monkeypatch
):
    """Runs recorded before the behaviour fingerprint: a clean commit is rebuilt and compared
    by behaviour (a docstring edit since is not stale, a changed constant is); without a clean
    commit only the bytes can be compared."""
    pkg, (code, docstring, constant) = code_history
    monkeypatch.setattr(provenance, "code_fingerprint", lambda: fingerprint_at(docstring, pkg))
    monkeypatch.setattr(provenance, "fingerprint_at", lambda c: fingerprint_at(c, pkg))
    old = {"code_fingerprint": "0123456789abcdef", "git_dirty": False}
    assert not is_stale(_run_with(tmp_path / "a", {**old, "git_commit": code}))
    assert is_stale(_run_with(tmp_path / "b", {**old, "git_commit": constant}))
    dirty = {**old, "git_commit": code, "git_dirty": True}
    assert is_stale(_run_with(tmp_path / "c", dirty))  # uncommitted changes: bytes differ
    same_bytes = {**dirty, "code_fingerprint": byte_fingerprint()}
    monkeypatch.setattr(provenance, "code_fingerprint", code_fingerprint)
    assert not is_stale(_run_with(tmp_path / "d", same_bytes))
    assert not is_stale(_run_with(tmp_path / "e", {"git_commit": code}))  # nothing recorded


# --- samples -------------------------------------------------------------------------------------


def test_sample_is_deterministic_per_seed(trained):
    from ablate.training.sample import sample_run

    run = str(trained["run"].path)
    a = sample_run(run, prompt="Row", tokens=40, seed=1)
    b = sample_run(run, prompt="Row", tokens=40, seed=1)
    c = sample_run(run, prompt="Row", tokens=40, seed=2)
    assert a == b and a != c and a.startswith("Row") and len(a) == 43  # char tokens
    by_id = sample_run(
        trained["run"].run_id[:6], prompt="Row", tokens=40, seed=1, store=trained["root"] / "runs"
    )
    assert by_id == a


def test_greedy_sample_matches_a_hand_written_argmax_loop(trained):
    from ablate.training.sample import load_run, sample_run

    cfg, tok, model = load_run(trained["run"])
    ids = tok.encode("Row 1")
    with torch.no_grad():
        for _ in range(10):
            logits = model(torch.tensor([ids[-cfg.data.seq_len :]]))
            ids.append(int(logits[0, -1].argmax()))  # (B, T, vocab), as nanoGPT's GPT
    got = sample_run(str(trained["run"].path), prompt="Row 1", tokens=10, temperature=0)
    assert got == tok.decode(ids)


def test_sample_errors_are_one_line_exit_2(trained, tmp_path):
    res = CliRunner().invoke(app, ["sample", "nope", "--store", str(trained["root"] / "runs")])
    assert res.exit_code == 2 and "no run directory or run id 'nope'" in res.output
    empty = tmp_path / "run"
    empty.mkdir()
    (empty / "run.yaml").write_text(yaml.safe_dump(trained["run"].read_run()))
    res = CliRunner().invoke(app, ["sample", str(empty)])
    assert res.exit_code == 2 and "has no checkpoint" in res.output
    assert res.output.count("\n") == 1


def test_a_process_start_is_read_from_proc_within_the_time_it_was_launched(tmp_path):
    import subprocess
    import sys
    import time

    if not Path("/proc/self/stat").is_file():
        pytest.skip("no /proc here")
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    after = time.time()
    try:
        time.sleep(0.5)  # the start is the launch's, not the time it is read
        started = process_started(child.pid)
    finally:
        child.kill()
        child.wait()
    # clock ticks are 10 ms; the uptime is read to 10 ms too
    assert before - 0.05 <= started <= after + 0.05
    assert process_started(2**22 + 1) is None  # no such process
