"""The results layer: what a study's runs left in the store, read back for the report and for
deciding claims (``ablate report``, ``ablate run confirm`` / ``until-decided``, ``ablate
register``'s pilot).

It sits between the store and its two readers: :mod:`ablate.study` plans runs and reads no
store; the report and the execution stage read a study's results only through here.

* :func:`resolve_studies`: the studies an ``ablate report`` call names, each with its YAML;
* :func:`read_study`: a study's runs -> :class:`StudyData` (a runs table, long-form metrics, the
  claims and margin of its YAML at the runs' profile);
* :func:`results_frame`: the ``results.csv`` table.
"""

from ablate.results.data import (
    DTYPE_PREFIX,
    REUSE_PREFIX,
    TRAIN_TAIL,
    TRAINED_AS,
    TRAINED_PREFIX,
    StudyData,
)
from ablate.results.locate import resolve_studies
from ablate.results.read import read_study, results_frame

__all__ = [
    "DTYPE_PREFIX",
    "REUSE_PREFIX",
    "TRAIN_TAIL",
    "TRAINED_AS",
    "TRAINED_PREFIX",
    "StudyData",
    "read_study",
    "resolve_studies",
    "results_frame",
]
