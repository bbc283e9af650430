"""The CPU demo: SFT, then GRPO, then a plot of the correctness reward per step."""
