"""The benchmarks, beside the flow (they import from it; nothing imports them): ``ablate bench``
runs ``cpu`` (``--section NAME``: one section), ``--gpu`` runs ``gpu``, ``--chaos`` ``chaos``;
``markdown`` writes every report."""
