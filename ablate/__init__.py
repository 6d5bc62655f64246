"""ablate: controlled ablation studies on one configurable transformer language model."""

from ablate.version import __version__

__all__ = ["__version__", "register"]


def __getattr__(name: str):
    # ``@ablate.register(axis, name)`` for plugins, imported on first use: the model (and so
    # torch) loads only when something needs it, so bad input is answered before torch loads
    if name == "register":
        from ablate.model.plugins import register

        return register
    raise AttributeError(f"module 'ablate' has no attribute {name!r}")
