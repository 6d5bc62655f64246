"""Stage 1: a study YAML becomes validated planned runs, with nothing trained or written.

``load_study(path)`` reads the YAML, expands grid x variants x seeds, applies the profile and
derived values, validates every run's config and the study's claims (parsed by
:mod:`ablate.claims.spec`), and checks at plan time what would otherwise fail mid-run
(``preflight``).

The modules, in the order ``load_study`` uses them: ``spec`` (the YAML's shape, with ``layers``:
values with where each was set, and ``ladder``: a scale ladder's rungs and step rule),
``expressions`` (derived values), ``plan`` (profile, rungs x variants x grid x seeds, run
names and ids, written with :mod:`ablate.names`), ``resolve`` (one run's config and who set
what), ``preflight``. Beside
them, ``results``: ``read_study`` reads what a study's runs left in the store back into tables
(for the report and for deciding claims).
"""

from ablate.study.load import load_study
from ablate.study.plan import PlannedRun, Study, planned_run_id, run_content
from ablate.study.spec import Reference, parse_reference, read_study_yaml

__all__ = [
    "PlannedRun",
    "Reference",
    "Study",
    "load_study",
    "parse_reference",
    "planned_run_id",
    "read_study_yaml",
    "run_content",
]
