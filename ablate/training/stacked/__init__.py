"""Stacked groups: many runs of one shape trained as one stacked model in one process.

``plan``: which runs stack and how many members a group gets (torch-free, read at plan time);
``ops``: the stacked tensors, the vmapped forward and the optimizer; ``group``: the training
loop of a group (``train_group``); ``store``: member checkpoints. A member's W&B run is
``ablate.tracking.runs``.
"""
