"""Generation with a Hugging Face transformers causal LM (the embedded default engine).

Prompts are token ids (the chat template is applied by the caller), so the ids the trainer sees
are exactly the ids that were sampled. Each completion carries the generator's logprob of every
sampled token, computed from the raw logits at the sampling temperature.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from actors.engines.sampling import SamplingConfig
from forge_kernels.types import Completion

__all__ = ["HFGenerationEngine"]


class HFGenerationEngine:
    """Batched sampling with ``model.generate``; ``n`` completions per prompt, prompt-major order."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, device: str = "cpu"):
        if tokenizer.pad_token_id is None:
            raise ValueError("tokenizer has no pad token; set tokenizer.pad_token before generating")
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.policy_version = 0

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], n: int, sampling: SamplingConfig) -> list[Completion]:
        """Sample ``n`` completions for each prompt; returns ``len(prompts) * n`` completions."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        rows = [p for p in prompts for _ in range(n)]  # prompt-major; greedy allows no n > 1
        width = max(len(p) for p in rows)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, p in enumerate(rows):  # left padding: every prompt ends at the same column
            input_ids[i, width - len(p):] = torch.tensor(p)
            attention[i, width - len(p):] = 1
        greedy = sampling.temperature == 0.0
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        out = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention.to(self.device),
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None if greedy else (sampling.top_k or None),
            max_new_tokens=sampling.max_tokens,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=pad,
            output_logits=True,
            return_dict_in_generate=True,
        )
        new_tokens = out.sequences[:, width:].cpu()
        logits = torch.stack(out.logits, dim=1).float().cpu()  # [B*n, steps, V], raw
        scale = 1.0 if greedy else sampling.temperature
        logprobs = torch.log_softmax(logits / scale, dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        completions = []
        for row in range(new_tokens.shape[0]):
            tokens = new_tokens[row].tolist()
            finish = "length"
            if self.tokenizer.eos_token_id in tokens:
                tokens = tokens[: tokens.index(self.tokenizer.eos_token_id) + 1]
                finish = "stop"
            completions.append(
                Completion(
                    prompt_ids=list(prompts[row // n]),
                    token_ids=tokens,
                    text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                    logprobs=logprobs[row, : len(tokens)].tolist(),
                    policy_version=self.policy_version,
                    finish_reason=finish,
                )
            )
        return completions

    @torch.no_grad()
    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Copy ``state_dict`` into the model in place (names must match) and adopt ``version``."""
        params = self.model.state_dict(keep_vars=True)  # tied weights appear under each name
        unknown = sorted(set(state_dict) - set(params))
        if unknown:
            raise KeyError(f"weights not in the model: {unknown[:5]}{' ...' if len(unknown) > 5 else ''}")
        for name, tensor in state_dict.items():
            params[name].copy_(tensor)
        self.policy_version = version
