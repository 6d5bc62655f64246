"""reports/claims.md: every report's claims in one page, each scale's outcome side by side."""

from __future__ import annotations

import pandas as pd

from ablate.report.claims_section import CLAIM_COLUMNS
from ablate.report.index import write_index


def _claims(
    folder,
    study,
    outcomes,
    confirmatory=True,
    scale="CPU scale: 1 parameters",
    paper="",
    metric="final_val_loss",
):
    rows = [
        {c: "" for c in CLAIM_COLUMNS}
        | {"study": study, "id": cid, "claim": f"{cid} text", "outcome": outcome}
        | {"metric": metric}
        | {"numbers": f"{cid} numbers", "confirmatory": confirmatory, "scale": scale}
        | {"registration": "registered in abc1234", "decided on": "decided on 3 seeds"}
        | {"paper": paper}
        for cid, outcome in outcomes.items()
    ]
    (folder / study).mkdir(parents=True)
    pd.DataFrame(rows, columns=CLAIM_COLUMNS).to_csv(folder / study / "claims.csv", index=False)


def test_the_index_lists_every_report_and_compares_scales(tmp_path):
    reports = tmp_path / "reports"
    _claims(reports, "norm", {"a": "reproduces", "b": "inconclusive"})
    _claims(
        reports, "pos", {"c": "contradicted"}, confirmatory=False, paper="the paper's 0.1-nat gap"
    )
    (reports / "old_study").mkdir()  # a report built before claims.csv: not listed
    assert write_index(reports) == reports / "claims.md"
    page = (reports / "claims.md").read_text()
    assert "| [norm](norm/report.md) | 2 | 1 reproduces, 1 inconclusive | 2 of 2 |" in page
    assert "| [pos](pos/report.md) | 1 | 1 contradicted | 0 of 1 |" in page
    assert "- **c** (exploratory): c text → **contradicted**: c numbers." in page
    assert "old_study" not in page and "Against the reports in" not in page

    gpu = reports / "gpu"
    _claims(gpu, "norm", {"a": "reproduces", "b": "contradicted"}, scale="GPU scale: 9")
    _claims(gpu, "pos", {"c": "reproduces"})
    write_index(gpu)  # rewrites its own index and the parent's, which compares them
    assert (
        "| [norm](norm/report.md) | 2 | 1 reproduces, 1 contradicted | 2 of 2 | GPU scale: 9 |"
        in (gpu / "claims.md").read_text()
    )
    page = (reports / "claims.md").read_text()
    assert "## Against the reports in [gpu/](gpu/claims.md)" in page
    no_paper = "no paper number in the study"
    assert (
        f"| [norm](norm/report.md) | a | a text ({no_paper}) | reproduces | reproduces | yes |"
        in page
    )
    row = f"| b | b text ({no_paper}) | inconclusive | contradicted | decided in gpu/ only |"
    assert row in page
    assert "| c | c text (the paper's 0.1-nat gap) | contradicted | reproduces | **no** |" in page


def test_scales_agree_by_what_they_say_not_by_their_evidence():
    from ablate.report.index import agreement

    assert agreement("reproduces by t-test only", "reproduces", "gpu") == "yes"
    assert agreement("reproduces", "contradicted by t-test only", "gpu") == "**no**"
    assert agreement("reproduces by t-test only", "inconclusive", "gpu") == "decided here only"
    assert agreement("inconclusive", "inconclusive", "gpu") == ""
    assert agreement("reproduces", "not run", "gpu") == ""
    assert agreement("pending, 2 of 6 runs", "reproduces", "gpu") == ""


def test_the_scales_table_says_when_two_scales_test_different_metrics(tmp_path):
    reports = tmp_path / "reports"
    _claims(reports, "arch", {"beats": "reproduces by t-test only", "same": "reproduces"})
    _claims(reports / "gpu", "arch", {"beats": "inconclusive"}, metric="best_val_loss")
    _claims(reports / "gpu", "ref", {"other": "reproduces"}, metric="best_val_loss")
    _claims(reports, "ref", {"other": "reproduces"}, metric="best_val_loss")
    write_index(reports)
    page = (reports / "claims.md").read_text()
    row = next(line for line in page.splitlines() if "| beats |" in line)
    assert row.endswith(
        "| decided here only; the scales test different metrics: final_val_loss here, "
        "best_val_loss in gpu/ |"
    )
    assert next(line for line in page.splitlines() if "| other |" in line).endswith("| yes |")
    # a claim one scale has not run has no second metric to compare
    assert next(line for line in page.splitlines() if "| same |" in line).endswith("| not run |  |")
