"""Turn sampled episodes into padded training tensors.

A single-turn episode is one row: its prompt ids followed by its sampled ids, right-padded.
A multi-turn episode whose turns are *prefix-chained* (turn ``k``'s prompt is turn ``k-1``'s prompt
and sampled ids plus the boundary/feedback ids, as :func:`forge_kernels.env.multiturn.full_context`
builds them) is also one row: the last turn's full sequence, with every turn's sampled tokens in
the loss mask, each carrying that turn's advantage; boundary and feedback tokens are context only.
Episodes whose turns are not chained (e.g. STTS contexts) get one row per turn.

Targets are the inputs shifted left by one; the loss mask covers exactly the sampled tokens, so
the trainer scores the ids the generator produced — nothing is re-tokenised. ``Episode.ref_logprobs``,
when present, holds one logprob per sampled token of all turns, in turn order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from forge_kernels.types import Batch, Episode, Turn

__all__ = ["collate_turns", "is_prefix_chained"]


def is_prefix_chained(episode: Episode) -> bool:
    """Whether each turn's prompt starts with the previous turn's prompt and sampled ids."""
    for prev, turn in zip(episode.turns, episode.turns[1:]):
        seq = prev.completion.prompt_ids + prev.completion.token_ids
        if turn.completion.prompt_ids[: len(seq)] != seq:
            return False
    return True


@dataclass
class _Row:
    ids: list[int]
    spans: list[tuple[int, Turn, int]]  # (start of the sampled tokens in ids, turn, offset in ref_logprobs)
    episode: Episode


def _rows(episodes: list[Episode], pack_episodes: bool) -> list[_Row]:
    rows = []
    for ep in episodes:
        offsets, total = [], 0
        for t in ep.turns:
            offsets.append(total)
            total += len(t.completion.token_ids)
        if ep.ref_logprobs is not None and len(ep.ref_logprobs) != total:
            raise ValueError(f"episode {ep.episode_id}: {len(ep.ref_logprobs)} ref logprobs for {total} sampled tokens")
        if pack_episodes and is_prefix_chained(ep):
            last = ep.turns[-1].completion
            spans = [(len(t.completion.prompt_ids), t, off) for t, off in zip(ep.turns, offsets)]
            rows.append(_Row(last.prompt_ids + last.token_ids, spans, ep))
        else:
            for t, off in zip(ep.turns, offsets):
                c = t.completion
                rows.append(_Row(c.prompt_ids + c.token_ids, [(len(c.prompt_ids), t, off)], ep))
    return rows


def collate_turns(episodes: list[Episode], pad_id: int, ignore_index: int = -100,
                  pack_episodes: bool = True) -> Batch:
    """A :class:`Batch`: one row per prefix-chained episode (else per turn); per-token advantage =
    the advantage of the turn that sampled the token."""
    if not episodes or not all(ep.turns for ep in episodes):
        raise ValueError("cannot collate an empty list of episodes (or episodes without turns)")
    rows = _rows(episodes, pack_episodes)
    width = max(len(r.ids) for r in rows)
    shape = (len(rows), width)
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    target_ids = torch.full(shape, ignore_index, dtype=torch.long)
    loss_mask = torch.zeros(shape, dtype=torch.bool)
    advantages = torch.zeros(shape)
    gen_logprobs = torch.zeros(shape)
    ref_logprobs = torch.zeros(shape) if all(ep.ref_logprobs is not None for ep in episodes) else None
    for row, r in enumerate(rows):
        input_ids[row, : len(r.ids)] = torch.tensor(r.ids)
        target_ids[row, : len(r.ids) - 1] = torch.tensor(r.ids[1:])
        for start, turn, off in r.spans:
            c = turn.completion
            n = len(c.token_ids)
            # position j predicts token j+1: sampled token k sits at target position start - 1 + k
            span = slice(start - 1, start - 1 + n)
            loss_mask[row, span] = True
            advantages[row, span] = turn.advantage
            gen_logprobs[row, span] = torch.tensor(c.logprobs)
            if ref_logprobs is not None:
                ref_logprobs[row, span] = torch.tensor(r.episode.ref_logprobs[off: off + n])
    return Batch(
        input_ids=input_ids,
        target_ids=target_ids,
        loss_mask=loss_mask,
        advantages=advantages,
        generator_logprobs=gen_logprobs,
        ref_logprobs=ref_logprobs,
        policy_versions=[min(turn.completion.policy_version for _, turn, _ in r.spans) for r in rows],
    )
