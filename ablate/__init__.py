"""ablate: controlled ablation studies on one configurable transformer language model."""

__version__ = "0.1.0"

from ablate.plugins import register  # noqa: E402 - ``@ablate.register(axis, name)`` for plugins

__all__ = ["__version__", "register"]
