"""The benchmarks, beside the flow (they import from it; nothing imports them).

``ablate bench`` is the one entry point: the CPU bench (``cpu``: framework overhead, model
speed, time to quality, efficiency, study throughput, memory vs corpus size; ``--section NAME``
runs one), ``--gpu`` (``gpu``) and ``--chaos`` (``chaos``). ``markdown`` writes every report.
"""
