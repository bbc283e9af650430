"""Generation over HTTP from any OpenAI-compatible completions server (vLLM, SGLang, hosted models).

For frozen remote policies: the eval app, rollouts against a fixed policy, server-based setups.
Prompts go out as token ids (the ``/v1/completions`` endpoint accepts a list of ints), and the
sampled token ids and their logprobs are read from the response — never re-tokenised from text —
so the trainer scores exactly what the server sampled. The server must return the ids: vLLM does
with ``return_token_ids`` (or ``return_tokens_as_token_ids``, ``"token_id:123"`` strings, which
this engine also reads); a server that returns neither is rejected with a clear error.

Weights: the remote policy is frozen. :meth:`update_weights` raises for any version other than
the one being served (0), so a training app that mistakenly points its trainer at a remote policy
fails on its first weight push instead of silently training against stale samples.

Logprobs are what the server reports: vLLM's default is the *raw* (temperature 1) distribution;
start it with ``--logprobs-mode processed_logprobs`` to get the temperature-scaled logprobs the
trainer recomputes (as the embedded vLLM engine does).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
from pydantic import Field

from actors.engines.sampling import SamplingConfig
from actors.engines.seeds import prompt_seeds
from forge_kernels.config import StrictModel
from forge_kernels.types import Completion

__all__ = ["OpenAIEngineConfig", "OpenAIGenerationEngine"]

_TOKEN_ID_PREFIX = "token_id:"


class OpenAIEngineConfig(StrictModel):
    """The ``openai:`` section of a generator."""

    base_url: str = Field(description="server root, e.g. http://127.0.0.1:8000/v1")
    model: str = Field(description="the served model name (vllm serve: the path or --served-model-name)")
    api_key_env: str | None = Field(default=None, description="environment variable holding the API key")
    timeout_s: float = Field(default=600.0, gt=0)
    max_concurrent_requests: int = Field(default=64, ge=1)


class OpenAIGenerationEngine:
    """A frozen policy behind an OpenAI-compatible ``/completions`` endpoint."""

    policy_version = 0  # frozen: the served weights never change through this engine

    def __init__(self, config: OpenAIEngineConfig, client: httpx.AsyncClient | None = None):
        self.config = config
        headers = {}
        if config.api_key_env:
            key = os.environ.get(config.api_key_env)
            if not key:
                raise ValueError(f"api_key_env={config.api_key_env!r} names an unset or empty environment variable")
            headers["Authorization"] = f"Bearer {key}"
        self._client = client or httpx.AsyncClient(
            base_url=config.base_url.rstrip("/") + "/", headers=headers, timeout=config.timeout_s)
        self._slots = asyncio.Semaphore(config.max_concurrent_requests)

    async def generate(self, prompts: list[list[int]], n: int, sampling: SamplingConfig) -> list[Completion]:
        """Sample ``n`` completions for each prompt (one request per prompt, run concurrently)."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        seeds = prompt_seeds(sampling.seed, len(prompts), n)
        groups = await asyncio.gather(
            *(self._complete(p, n, sampling, seed) for p, seed in zip(prompts, seeds, strict=True)))
        return [c for group in groups for c in group]

    def _request_body(self, prompt: list[int], n: int, sampling: SamplingConfig, seed: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.config.model,
            "prompt": list(prompt),
            "n": n,
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,  # the sampled token's logprob only
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": True,
        }
        if sampling.top_k:
            body["top_k"] = sampling.top_k
        if seed is not None:
            body["seed"] = seed
        return body

    async def _complete(self, prompt: list[int], n: int, sampling: SamplingConfig,
                        seed: int | None) -> list[Completion]:
        greedy = sampling.temperature == 0.0  # servers (vLLM) refuse n > 1 for greedy: all samples are equal
        wanted = 1 if greedy else n
        async with self._slots:
            response = await self._client.post("completions", json=self._request_body(prompt, wanted, sampling, seed))
        if response.status_code != 200:
            raise RuntimeError(
                f"{self.config.base_url} answered {response.status_code} to a completions request: "
                f"{response.text[:500]}")
        choices = sorted(response.json()["choices"], key=lambda c: c["index"])
        if len(choices) != wanted:
            raise RuntimeError(f"{self.config.base_url} returned {len(choices)} choices, expected n={wanted}")
        return [self._completion(prompt, choice) for choice in choices * (n // wanted)]

    def _completion(self, prompt: list[int], choice: dict[str, Any]) -> Completion:
        logprobs = choice.get("logprobs") or {}
        token_ids = choice.get("token_ids")
        if token_ids is None:
            token_ids = [_parse_token_id(t) for t in logprobs.get("tokens", [])]
        token_logprobs = logprobs.get("token_logprobs")
        if token_logprobs is None or len(token_logprobs) != len(token_ids):
            raise RuntimeError(
                f"{self.config.base_url} returned {len(token_ids)} token ids but "
                f"{None if token_logprobs is None else len(token_logprobs)} logprobs; the server must "
                f"support `logprobs` on /completions")
        served_prompt = choice.get("prompt_token_ids")
        if served_prompt is not None and list(served_prompt) != list(prompt):
            raise RuntimeError("the server changed the prompt's token ids (it must not add BOS or re-tokenise)")
        finish = choice.get("finish_reason")
        if finish not in ("stop", "length"):
            raise RuntimeError(f"{self.config.base_url} ended a completion with finish_reason={finish!r}")
        return Completion(
            prompt_ids=list(prompt), token_ids=[int(t) for t in token_ids], text=choice.get("text", ""),
            logprobs=[float(lp) for lp in token_logprobs], policy_version=self.policy_version,
            finish_reason=finish,
        )

    async def update_weights(self, version: int) -> None:
        """A remote policy is frozen: only the served version (0) is accepted."""
        if version != self.policy_version:
            raise RuntimeError(
                f"the openai engine serves a frozen remote policy (version {self.policy_version}) and cannot "
                f"load version {version}; use engine: vllm or hf for a policy that trains")

    async def close(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()


def _parse_token_id(token: str) -> int:
    if not token.startswith(_TOKEN_ID_PREFIX):
        raise RuntimeError(
            f"the server returned token {token!r} as text, not as an id; it must support vLLM's "
            f"`return_token_ids` or `return_tokens_as_token_ids` so nothing is re-tokenised")
    return int(token[len(_TOKEN_ID_PREFIX):])
