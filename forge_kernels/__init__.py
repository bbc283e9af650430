"""Forge Kernels: RL post-training for language models that write fast, correct GPU kernels."""

__version__ = "0.1.0"
