"""ablate: controlled ablation studies on one configurable transformer language model."""

__version__ = "0.1.0"
