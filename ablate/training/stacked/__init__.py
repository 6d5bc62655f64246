"""Stacked groups: many runs of one shape trained as one stacked model in one process.

``plan``: which runs stack and how many members a group gets (torch-free, read at plan time);
``lit``: the group as one LightningModule (one model of k members, ``ablate.model.members``,
and the solo run's step and per-step metrics, ``training.lit.LitRuns``); ``member``: a
member's store, data and state between fits; ``group``: ``train_group``, the fits of a group;
``store``: member checkpoints.
A member's W&B run is ``ablate.tracking.runs``.
"""
