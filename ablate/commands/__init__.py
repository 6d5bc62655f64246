"""The commands beside the flow's own: ``ablate bench``, ``sync``, ``dashboard`` and
``reproduce``, each a thin typer command function in a module of its own that parses options and
calls one function of the stage it serves; ``ablate.cli`` registers them. :mod:`.options` holds
what every command shares (the options every command spells the same way, the one-line error)."""
