"""Stage 1: a study YAML becomes validated planned runs, with nothing trained or written.

``load_study(path)`` reads the YAML, expands grid x variants x seeds, applies the profile and
derived values, validates every run's config and the study's claims, and checks at plan time
what would otherwise fail mid-run (``preflight``).
"""

from ablate.study.load import (
    PlannedRun,
    Reference,
    Study,
    fmt_value,
    load_study,
    parse_reference,
    planned_run_id,
    read_study_yaml,
    run_content,
    short_names,
)

__all__ = [
    "PlannedRun",
    "Reference",
    "Study",
    "fmt_value",
    "load_study",
    "parse_reference",
    "planned_run_id",
    "read_study_yaml",
    "run_content",
    "short_names",
]
