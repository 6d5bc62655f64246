"""Stage 3: training. ``train.train_group`` trains a group of runs (``train.train_run``: a group
of one) from their ``RunConfig``s: the Lightning module (``lit``) under the ``Trainer`` of
``trainer``, its step (``step``), optimizer (``adamw``), schedules, checkpoints, loggers (the
store's; W&B's from ``ablate.tracking``) and final evaluation (``finish``), writing everything
into each run's store directory.
"""
