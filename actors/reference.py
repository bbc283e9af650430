"""The reference model actor: frozen initial policy, logprobs of sampled tokens for the KL term."""

from __future__ import annotations

import asyncio
from typing import Literal

import torch
from pydantic import Field

from actors.common import load_model, set_torch_threads
from forge_kernels.config import StrictModel
from forge_kernels.runtime import Actor, endpoint
from forge_kernels.types import Completion, Episode
from losses.ops import token_logprobs, token_logprobs_from_hidden

__all__ = ["ReferenceModel", "sequence_logprobs"]


@torch.no_grad()
def sequence_logprobs(model: torch.nn.Module, completions: list[Completion], temperature: float,
                      micro_batch_tokens: int, device: torch.device, fused_lm_head: bool = False) -> list[list[float]]:
    """Logprob under ``model`` of every sampled token of each completion (prompt tokens skipped).

    ``fused_lm_head``: score from the last hidden states and the LM head in vocabulary chunks
    (:func:`losses.ops.token_logprobs_from_hidden`) instead of materialising the logits."""
    out: list[list[float]] = [[] for _ in completions]
    order = sorted(range(len(completions)), key=lambda i: -len(completions[i].prompt_ids + completions[i].token_ids))
    start = 0
    while start < len(order):
        width = len(completions[order[start]].prompt_ids) + len(completions[order[start]].token_ids)
        rows = max(1, micro_batch_tokens // max(width, 1))
        chunk = order[start:start + rows]
        start += rows
        ids = torch.zeros((len(chunk), width), dtype=torch.long)
        targets = torch.full((len(chunk), width), -100, dtype=torch.long)
        for r, i in enumerate(chunk):
            seq = completions[i].prompt_ids + completions[i].token_ids
            ids[r, : len(seq)] = torch.tensor(seq)
            targets[r, : len(seq) - 1] = torch.tensor(seq[1:])
        if fused_lm_head:
            hidden = model.get_decoder()(input_ids=ids.to(device)).last_hidden_state
            (logp, _), _ = token_logprobs_from_hidden(hidden, model.get_output_embeddings().weight,
                                                      targets.to(device), temperature)
        else:
            (logp, _), _ = token_logprobs(model(input_ids=ids.to(device)).logits, targets.to(device), temperature)
        logp = logp.float().cpu()
        for r, i in enumerate(chunk):
            p, n = len(completions[i].prompt_ids), len(completions[i].token_ids)
            out[i] = logp[r, p - 1: p - 1 + n].tolist()
    return out


class ReferenceModel(Actor):
    """Logprobs of sampled tokens under the frozen starting checkpoint."""

    class Config(StrictModel):
        model_path: str = Field(default="", description="the checkpoint the policy started from; the GRPO app fills it in")
        device: str = "cpu"
        dtype: Literal["float32", "bfloat16"] = "float32"
        temperature: float = Field(default=1.0, gt=0, description="the generator's sampling temperature")
        micro_batch_tokens: int = Field(default=8192, ge=1)
        fused_lm_head: bool = Field(default=False, description="score from hidden states + LM head, no [B, T, V] logits")
        torch_threads: int | None = Field(default=None, ge=1)

    async def setup(self) -> None:
        set_torch_threads(self.config.torch_threads)
        self.device = torch.device(self.config.device)
        self.model = load_model(self.config.model_path, self.config.dtype).to(self.device).eval()
        self.model.requires_grad_(False)

    @endpoint
    async def logprobs(self, completions: list[Completion]) -> list[list[float]]:
        """One list per completion, one logprob per sampled token."""
        cfg = self.config
        return await asyncio.to_thread(sequence_logprobs, self.model, completions, cfg.temperature,
                                       cfg.micro_batch_tokens, self.device, cfg.fused_lm_head)

    @endpoint
    async def episode_logprobs(self, episodes: list[Episode]) -> list[list[float]]:
        """Per episode, the logprob of every sampled token of every turn, turns in order (what the
        trainer's collation expects). Each episode is scored as one sequence — one forward for all
        its turns — so multi-turn episodes must be prefix-chained."""
        views = [ep.as_one_completion() for ep in episodes]
        scored = await self.logprobs(views)
        return [[lps[i] for i in ep.sampled_positions()] for ep, lps in zip(episodes, scored, strict=True)]
