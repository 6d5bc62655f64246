"""Reports: from the run store to answers with seeds, CIs, significance tests and figures.

``build_reports(["norm_placement"], store=Path("runs"), out=Path("reports"))`` writes, per study,
``reports/<study>/``: ``results.csv`` (one row per run), ``report.md``, a self-contained
``report.html`` (figures embedded as base64 PNG), the PNG figures and the W&B dashboard specs
(``wandb_workspace.json``, ``wandb_report.json``). The folder is built in a
temporary directory next to it and swapped in by rename, so a half-built report never replaces
a good one. Reports read only the store and can be rebuilt at any time, also mid-study.

The stage, in the order a report is built (``build`` runs it; this package only hands its
names on):

* :func:`ablate.results.read_study`: the store -> a ``StudyData`` (runs and metrics
  tables).
* :func:`ablate.claims.outcomes.analyse`: the exploratory axis comparisons (Benjamini–Hochberg
  within the report) and the study's claims decided (the confirmatory family, Holm over the
  claims only), with the statistics of :mod:`ablate.claims`.
* ``tables``, ``claims_section``, ``repro`` (text and tables), ``audit`` (the registration's
  versions and every confirmation attempt) and ``figure_data`` -> ``plots`` (the PNGs) are put
  in order by ``blocks`` and written as Markdown and HTML by ``render``;
  ``wandb_report`` logs the same to W&B, and ``dashboards`` writes the study's W&B workspace
  and Report specs beside it.
* Beside the build: ``wandb_sync`` (``ablate sync``) uploads a study's offline W&B runs,
  ``wandb_views`` (``ablate dashboard``) saves the dashboards and updates them next time.
"""

from ablate.report.build import build_report, build_reports

__all__ = ["build_report", "build_reports"]
