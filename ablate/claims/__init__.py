"""A study's claims, end to end: what a claim says, how it is registered before the runs that
decide it, the statistics it is tested with, and its decision.

Below the stages that use it: the study parses a YAML's ``claims:`` with :mod:`.spec` at plan
time; ``ablate register``, ``run confirm`` and ``run until-decided`` (execution) and the report
decide claims here. Nothing here imports the study, execution, training or the report. It reads
a study's runs as the study reads them back from the store
(:class:`ablate.results.StudyData`, or anything with its fields), the registration files
and their history in git, and the decisions log of ``run until-decided``; it writes nothing but
a registration file (:func:`.registration.write_registration`). The modules, bottom up:

* ``spec``: a claim (:class:`~ablate.claims.spec.Claim`) parsed from the YAML, its fingerprint;
  ``arms``: which planned variants a claim is decided on;
* ``stats`` (numbers on per-seed values) -> ``comparisons`` (two groups of runs, adjusted over a
  family); ``one_sample`` (a claim on one arm, intersections), ``fit`` (the LR optimum and its
  exponent), ``power`` (the seeds the deciding test needs), ``sequential`` (the alpha spending
  of sequential looks);
* ``registration``: the committed registration file, its design and its proof from git;
  ``standing``: which runs are confirmation runs of which attempt, how far a registered design
  has got, and whether a decided claim is confirmatory;
* ``interaction`` and ``trend`` (a difference of differences; a gap over a ladder's rungs, its
  slope and its steps); ``labels``: the words an outcome is written in;
* ``checks``: one claim tested and decided, the confirmatory family; ``verdicts``: a comparison
  and a decided claim in words; ``looks``: the looks of ``run until-decided`` (the design, its
  log, a look replayed); ``outcomes``: a study's claims decided, for the report
  (:func:`~ablate.claims.outcomes.analyse`), for a look and for a registration's pilot.
"""
