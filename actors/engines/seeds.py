"""Per-request seeds for engines that sample each prompt as its own request (vLLM, HTTP servers).

vLLM seeds the ``j``-th of a request's ``n`` samples with ``seed + j``, so giving every prompt of
a call the call's seed would correlate their samples, and consecutive call seeds (the Generator
hands out ``s, s+1, ...``) would repeat samples across calls. Each prompt therefore gets a base
seed drawn from a generator seeded with the call's seed: reproducible, and far apart.
"""

from __future__ import annotations

import random

__all__ = ["prompt_seeds"]

_MAX_SEED = 2**31 - 1


def prompt_seeds(seed: int | None, prompts: int, n: int) -> list[int | None]:
    """One base seed per prompt (``None`` everywhere when ``seed`` is ``None``: unseeded)."""
    if seed is None:
        return [None] * prompts
    rng = random.Random(seed)
    return [rng.randrange(0, _MAX_SEED - n) for _ in range(prompts)]
