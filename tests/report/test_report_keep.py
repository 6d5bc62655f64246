"""A committed report is never replaced by a partial build (``ablate report`` after an
interrupted ``ablate run``): the committed folder and ``claims.md`` stay byte for byte, the
partial build goes to ``<study>/partial/``, the other studies are rebuilt."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ablate.report import build_reports
from ablate.report.claims_section import CLAIM_COLUMNS
from ablate.report.index import write_index


def _tiny(store: Path, write_run, unfinished: dict | None = None) -> Path:
    """Study ``tiny``: norm placement post/pre x 2 seeds; ``unfinished``: (norm, seed) ->
    status for runs a Ctrl-C left behind."""
    for norm, final in (("post", 1.9), ("pre", 1.6)):
        for seed in (0, 1):
            status = (unfinished or {}).get((norm, seed), "completed")
            axes = {"model.norm_placement": norm}
            write_run(store, "tiny", axes, seed, status, final + seed / 50)
    return store


def _decided_claims(folder: Path) -> None:
    """A claims.csv as a confirmed report leaves it: one claim, decided."""
    row = dict.fromkeys(CLAIM_COLUMNS, "")
    row |= {"study": folder.name, "id": "pre-beats-post", "claim": "Pre-LN beats Post-LN"}
    row |= {"expect": "better", "metric": "final_val_loss", "outcome": "reproduces"}
    row |= {"numbers": "pre beats post by 0.3 nats", "confirmatory": True}
    pd.DataFrame([row], columns=CLAIM_COLUMNS).to_csv(folder / "claims.csv", index=False)


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "partial" not in p.relative_to(folder).parts
    }


def test_an_interrupted_run_leaves_the_committed_report_unchanged(tmp_path, write_run, git, capsys):
    repo = tmp_path / "repo"
    reports = repo / "reports"
    repo.mkdir()
    git(repo, "init", "-q")
    build_reports([], store=_tiny(tmp_path / "done", write_run), out=reports, quiet=True)
    _decided_claims(reports / "tiny")
    write_index(reports)
    git(repo, "add", "reports")
    git(repo, "commit", "-q", "-m", "the confirmed report")
    before = _files(reports)
    assert "tiny/report.md" in before and "claims.md" in before

    # make run interrupted: one run stopped, one failed; another study finished
    store = _tiny(tmp_path / "runs", write_run, {("pre", 1): "running", ("post", 1): "failed"})
    write_run(store, "other", {"model.norm_placement": "pre"}, 0, "completed", 1.7)
    write_run(store, "other", {"model.norm_placement": "post"}, 0, "completed", 1.8)
    build_reports([], store=store, out=reports, quiet=True)

    after = _files(reports)
    assert {k: v for k, v in after.items() if not k.startswith("other/")} == before
    err = capsys.readouterr().err
    line = [x for x in err.splitlines() if "kept the committed report" in x]
    assert len(line) == 1 and "tiny" in line[0] and "--force" in line[0]
    assert "committed in git, 1 claim(s) decided" in line[0] and "2 of 4 runs" in line[0]
    partial = (reports / "tiny" / "partial" / "report.md").read_text()
    assert "PARTIAL: 2 of 4 runs finished" in partial
    assert not (reports / "tiny" / "partial" / "archive").exists()
    assert (reports / "other" / "report.md").is_file()  # the other study went on
    assert git(repo, "status", "--porcelain", "reports/tiny", "reports/claims.md") == ""


def test_a_report_with_decided_claims_is_kept_outside_git_and_force_replaces_it(
    tmp_path, write_run, capsys
):
    from typer.testing import CliRunner

    from ablate.cli import app

    reports = tmp_path / "reports"
    build_reports([], store=_tiny(tmp_path / "done", write_run), out=reports, quiet=True)
    _decided_claims(reports / "tiny")
    write_index(reports)
    before = _files(reports)

    store = _tiny(tmp_path / "runs", write_run, {("pre", 1): "running"})
    res = CliRunner().invoke(app, ["report", "--store", str(store), "--out", str(reports)])
    assert res.exit_code == 0, res.output
    assert _files(reports) == before  # no report replaced, so claims.md is not rewritten
    assert "not in git, 1 claim(s) decided" in res.output
    assert (reports / "tiny" / "partial" / "report.md").is_file()

    args = ["report", "--store", str(store), "--out", str(reports), "--force"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "PARTIAL: 3 of 4" in (reports / "tiny" / "report.md").read_text()
    assert not (reports / "tiny" / "partial").exists()  # a replacing build drops the old one
    assert not (reports / "tiny" / "claims.csv").exists()  # this build decided none
