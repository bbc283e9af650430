"""Supervised fine-tuning (the cold start the GRPO app begins from)."""
