"""``ablate reproduce``: archived runs retrained with today's code, compared per run, and what
it found in the report."""

from __future__ import annotations

import tarfile

import pandas as pd
from typer.testing import CliRunner

from ablate.cli import app
from ablate.execution.reproduce import TOLERANCE, choose_runs, verdict
from ablate.execution.runner import run_study
from ablate.report import build_reports
from ablate.report.repro import reproduced_line


def test_the_verdict_is_identical_within_tolerance_or_different():
    run = {"status": "completed", "final_val_loss": 2.2755380, "best_val_loss": 2.2755380}
    assert verdict(run, dict(run)) == "identical"
    near = {**run, "final_val_loss": run["final_val_loss"] + 3e-8}
    assert verdict(run, near) == "within tolerance"
    assert verdict(run, {**run, "best_val_loss": 2.2755380 + 2 * TOLERANCE}) == "different"
    assert verdict(run, {"status": "diverged", "final_val_loss": None}) == "different"


def test_it_picks_the_latest_confirmation_attempts_runs_one_variant_at_a_time():
    runs = pd.DataFrame(
        {
            "run_id": ["a0", "a1", "b0", "b1", "old"],
            "variant": ["a", "a", "b", "b", "a"],
            "seed": [5, 6, 5, 6, 2],
            "registration": ["r2", "r2", "r2", "r2", "r1"],
            "started": [20.0, 21.0, 20.0, 21.0, 1.0],
        }
    )
    assert choose_runs(runs, 3) == ["a0", "b0", "a1"]
    assert choose_runs(runs, 1, ["old"]) == ["old"]


def test_reproduce_retrains_an_archived_run_and_the_report_says_so(make_study, tmp_path):
    path = make_study("rep", base={"train.max_steps": 4}, seeds=[0])
    store, reports = tmp_path / "runs", tmp_path / "reports"
    run_study(path, store=store, progress=False)
    archive = reports / "rep" / "archive"
    archive.mkdir(parents=True)
    with tarfile.open(archive / "store.tar.gz", "w:gz") as tar:
        tar.add(store / "rep", arcname="rep")
    args = ["reproduce", "rep", "--runs", "1", "--reports", str(reports)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    (row,) = pd.read_csv(reports / "rep" / "reproduce" / "runs.csv").to_dict("records")
    # the same code, seed, data and thread count on this machine: the same floats
    assert row["verdict"] == "identical" and row["diff_final_val_loss"] == 0.0
    assert row["tolerance"] == TOLERANCE and row["archived_fingerprint"] == row["today_fingerprint"]
    (md,) = build_reports([str(path)], store=store, out=reports, quiet=True)
    repro = (md.parent / "provenance.md").read_text().split("## Reproducibility")[1]
    repro = repro.split("\n## ")[0]
    assert "`ablate reproduce` retrained 1 of these runs with today's code" in repro
    assert f"| {row['run_id']} |" in repro and "| identical |" in repro
    assert (reports / "rep" / "reproduce" / "runs.csv").is_file()  # kept by the rebuild


def test_reproduce_without_an_archive_is_one_line(tmp_path):
    res = CliRunner().invoke(app, ["reproduce", "nope", "--reports", str(tmp_path)])
    assert res.exit_code == 2 and "no archived store" in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_a_retrain_by_earlier_code_says_so_and_names_the_current_code():
    rows = pd.DataFrame(
        {
            "verdict": ["within tolerance"],
            "today_fingerprint": ["280aad17f0bbbc1c"],
            "retrained": ["2026-11-28 02:28 UTC"],
            "tolerance": [1e-4],
        }
    )
    line = reproduced_line(rows, "280aad17f0bbbc1c")
    assert "with today's code (fingerprint 280aad17f0bbbc1c, 2026-11-28 02:28 UTC):" in line
    line = reproduced_line(rows, "5989a62d35f10ad8")
    assert (
        "with earlier code (fingerprint 280aad17f0bbbc1c, 2026-11-28 02:28 UTC; the current "
        "code is 5989a62d35f10ad8): 1 within tolerance" in line
    )
