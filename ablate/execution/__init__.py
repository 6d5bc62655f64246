"""Stage 2: where runs train. The runner plans a study, skips finished runs and hands the rest to
an executor (``executors``: local pool, Ray, SLURM); each task trains in ``worker.execute_group``
under its lease. Live progress lines, the modes of ``ablate run`` (smoke, confirm,
until-decided) and ``ablate train`` live here too.
"""
