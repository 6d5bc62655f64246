"""``python -m ablate``: the same as the ``ablate`` command."""

from ablate.cli import main

if __name__ == "__main__":
    main()
