"""Leaf: ablate's version (``ablate.__version__``; the store records it in each run's meta)."""

__version__ = "0.1.0"
