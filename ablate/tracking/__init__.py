"""Weights & Biases, in one place: the mirror of the store that training writes and the report
reads (the store stays the source of truth; every run and report works without W&B).

``mode``: online/offline/disabled, the login, the project, a study's tracking settings;
``ids``: W&B ids, tags, names and the keys runs and views share; ``runs``: a run's W&B run
(its own run object, solo or a stacked member), started with one online-to-offline fallback,
logged, finished; ``report_run``: the report as a W&B run;
``sync``: offline-run discovery and ``ablate sync``; ``specs``: the workspace and Report specs
``ablate report`` writes; ``views``: ``ablate dashboard``, which saves them.

Imported by training and report, importing neither. ``wandb`` and ``wandb_workspaces`` are
imported inside the functions that use them: a run trains where neither is installed.
"""
