"""Stacked groups: many runs of one shape trained as one stacked model in one process.

``plan``: which runs stack and how many members a group gets (torch-free, read at plan time);
``ops``: the stacked tensors and the vmapped forward; ``lit``: the group as one LightningModule
(the solo run's books, ``training.lit.LitRuns``); ``member``: a member's store, data and state
between fits; ``group``: ``train_group``, the fits of a group; ``store``: member checkpoints.
A member's W&B run is ``ablate.tracking.runs``.
"""
