"""Models built locally (no hub downloads): a byte-level BPE tokenizer and tiny Qwen3 models."""
