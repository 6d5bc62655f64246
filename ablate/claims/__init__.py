"""A study's claims, end to end: what a claim says, how it is registered before the runs that
decide it, the statistics it is tested with, and its decision.

Below the stages that use it: the study parses a YAML's ``claims:`` with :mod:`.spec` at plan
time; ``ablate register`` / ``--confirm`` / ``--until-decided`` (execution) and the report
decide them here. Nothing here imports the study, execution, training or the report; it reads
the run store's decisions log only. The modules, from the bottom up:

* ``spec``: a claim (:class:`~ablate.claims.spec.Claim`) parsed from the YAML, its fingerprint;
  ``arms``: which planned variants a claim is decided on;
* ``registration``: the committed registration file, its design and its proof from git;
* ``stats`` (numbers on per-seed values) -> ``comparisons`` (two groups of runs, adjusted over a
  family) -> ``verdicts`` (the sentences); ``one_sample`` (a claim on one arm, intersections),
  ``fit`` (the LR optimum and its exponent), ``power`` (the seeds the deciding test needs),
  ``sequential`` (the alpha spending of sequential looks);
* ``standing`` (a claim's registration standing, proven from git; which runs are confirmation
  runs, how far a registered design has got) -> ``checks`` (one claim tested and decided, the
  confirmatory family) -> ``looks`` (the looks of ``--until-decided``: the design, its log, a
  look replayed) -> ``outcomes`` (a study's claims decided: for the report, a look, a pilot).

They take a study's runs table read back from the store (:class:`ablate.study.results.
StudyData`, or anything with its fields) and never write it.
"""
