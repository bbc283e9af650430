"""Turn sampled episodes into padded training tensors.

Each turn becomes one row: its prompt ids followed by its sampled ids, right-padded. Targets are
the inputs shifted left by one; the loss mask covers exactly the sampled tokens, so the trainer
scores the ids the generator produced — nothing is re-tokenised.
"""

from __future__ import annotations

import torch

from forge_kernels.types import Batch, Episode

__all__ = ["collate_turns"]


def collate_turns(episodes: list[Episode], pad_id: int, ignore_index: int = -100) -> Batch:
    """A :class:`Batch` with one row per turn; per-token advantage = the turn's advantage."""
    turns = [(ep, turn) for ep in episodes for turn in ep.turns]
    if not turns:
        raise ValueError("cannot collate an empty list of episodes (or episodes without turns)")
    width = max(len(t.completion.prompt_ids) + len(t.completion.token_ids) for _, t in turns)
    rows = len(turns)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    target_ids = torch.full((rows, width), ignore_index, dtype=torch.long)
    loss_mask = torch.zeros((rows, width), dtype=torch.bool)
    advantages = torch.zeros((rows, width))
    gen_logprobs = torch.zeros((rows, width))
    ref_logprobs = torch.zeros((rows, width)) if all(ep.ref_logprobs is not None for ep, _ in turns) else None
    for row, (ep, turn) in enumerate(turns):
        c = turn.completion
        seq = c.prompt_ids + c.token_ids
        p, n = len(c.prompt_ids), len(c.token_ids)
        input_ids[row, : len(seq)] = torch.tensor(seq)
        target_ids[row, : len(seq) - 1] = torch.tensor(seq[1:])
        # position j predicts token j+1: sampled token k sits at target position p - 1 + k
        span = slice(p - 1, p - 1 + n)
        loss_mask[row, span] = True
        advantages[row, span] = turn.advantage
        gen_logprobs[row, span] = torch.tensor(c.logprobs)
        if ref_logprobs is not None:
            if len(ep.ref_logprobs) != n:
                raise ValueError(
                    f"episode {ep.episode_id}: {len(ep.ref_logprobs)} ref logprobs for {n} sampled tokens"
                )
            ref_logprobs[row, span] = torch.tensor(ep.ref_logprobs)
    return Batch(
        input_ids=input_ids,
        target_ids=target_ids,
        loss_mask=loss_mask,
        advantages=advantages,
        generator_logprobs=gen_logprobs,
        ref_logprobs=ref_logprobs,
        policy_versions=[t.completion.policy_version for _, t in turns],
    )
