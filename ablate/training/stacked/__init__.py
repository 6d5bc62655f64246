"""The parts of a group of runs (k members trained as one model; a solo run is k = 1) that
``ablate.training.train``'s lifecycle uses.

``lit``: the group as one LightningModule (one model of k members, ``ablate.model.members``,
with the step and per-step metrics of ``training.lit.LitRuns``); ``member``: a run's store,
data and state between fits; ``store``: the one checkpoint format and its writer.
A member's W&B run is ``ablate.tracking.runs``.
"""
