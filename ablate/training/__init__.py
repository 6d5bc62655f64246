"""Stage 3: one run. ``train.train_run`` builds the model and data from a ``RunConfig`` and fits
the Lightning module (``lit``) with its schedules, checkpoints, loggers (the store's; W&B's from
``ablate.tracking``) and callbacks, writing everything into the run's store directory.
"""
