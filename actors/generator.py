"""The generator actor: samples completions with an engine and swaps in new policy versions.

``generate(prompt_ids, n)`` returns ``len(prompt_ids) * n`` :class:`Completion` s, each stamped
with the policy version that produced it. ``update_weights(v)`` closes the gate to new requests,
waits for the requests in flight to finish, copies version ``v`` from the tensor store into the
engine and opens the gate again, so no sequence is ever sampled from two versions.

The runtime's mailbox already runs one endpoint call at a time; the gate makes the guarantee
hold on its own (an engine may run requests concurrently, and the generation itself runs in a
worker thread so the event loop — other actors, on the ``local`` backend — keeps going).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from actors.common import load_model, load_tokenizer, set_torch_threads
from actors.engines.gate import VersionGate
from actors.engines.hf_generation import HFGenerationEngine
from actors.engines.openai_engine import OpenAIEngineConfig, OpenAIGenerationEngine
from actors.engines.sampling import SamplingConfig
from actors.engines.vllm_engine import VLLMEngineConfig, VLLMGenerationEngine
from forge_kernels.config import StrictModel
from forge_kernels.metrics import Reduce, record_metric
from forge_kernels.runtime import Actor, endpoint
from forge_kernels.store import StoreConfig, build_store, weights_key
from forge_kernels.types import Completion

__all__ = ["Generator", "VersionGate"]


class Generator(Actor):
    """Samples completions from a Hugging Face checkpoint; pulls new weights from the tensor store.

    ``engine`` picks what samples: ``hf`` (transformers, in this process), ``vllm`` (vLLM's async
    engine, which loads versions from the store inside its own workers) or ``openai`` (a frozen
    policy behind an OpenAI-compatible server; it cannot load new versions).
    """

    class Config(StrictModel):
        model_path: str = Field(default="", description="Hugging Face checkpoint directory (model + tokenizer); the GRPO app fills it in")
        engine: Literal["hf", "vllm", "openai"] = "hf"
        vllm: VLLMEngineConfig = VLLMEngineConfig()
        openai: OpenAIEngineConfig | None = Field(default=None, description="the server, for engine: openai")
        device: str = "cpu"
        dtype: Literal["float32", "bfloat16"] = "float32"
        sampling: SamplingConfig = SamplingConfig()
        store: StoreConfig = StoreConfig()
        torch_threads: int | None = Field(default=None, ge=1, description="intra-op threads of this actor")

        @model_validator(mode="after")
        def _openai_needs_a_server(self) -> Generator.Config:
            if self.engine == "openai" and self.openai is None:
                raise ValueError("engine: openai needs an `openai:` section (base_url, model)")
            return self

    async def setup(self) -> None:
        set_torch_threads(self.config.torch_threads)
        cfg = self.config
        self.engine: HFGenerationEngine | VLLMGenerationEngine | OpenAIGenerationEngine
        if cfg.engine == "hf":
            model = load_model(cfg.model_path, cfg.dtype)
            self.engine = HFGenerationEngine(model, load_tokenizer(cfg.model_path), cfg.device)
        elif cfg.engine == "vllm":  # the engine start blocks for seconds: keep the event loop free
            self.engine = await asyncio.to_thread(VLLMGenerationEngine, cfg.model_path, cfg.dtype, cfg.vllm, cfg.store)
        else:
            assert cfg.openai is not None  # checked by the config
            self.engine = OpenAIGenerationEngine(cfg.openai)
        self.store = build_store(self.config.store)
        self.gate = VersionGate()
        # a fixed seed must not give every call the same samples: each call gets the next seed
        seed = self.config.sampling.seed
        self._next_seed = None if seed is None else seed * 1_000_003 + self.rank
        if cfg.engine != "openai":  # a replica restarted mid-run starts at the newest published version
            versions = [int(k.rsplit("v", 1)[1]) for k in await self.store.keys("weights/v")]
            if versions:
                await self._load_version(max(versions))

    @endpoint
    async def generate(self, prompt_ids: list[list[int]], n: int,
                       sampling: SamplingConfig | None = None) -> list[Completion]:
        """``n`` completions per prompt (prompt-major), all from one policy version."""
        sampling = sampling or self.config.sampling
        if self._next_seed is not None and sampling.seed is not None:
            sampling = sampling.model_copy(update={"seed": self._next_seed})
            self._next_seed += 1
        start = time.monotonic()
        async with self.gate.request():
            if isinstance(self.engine, HFGenerationEngine):
                completions = await asyncio.to_thread(self.engine.generate, prompt_ids, n, sampling)
            else:
                completions = await self.engine.generate(prompt_ids, n, sampling)
        record_metric("generator/completions", len(completions), Reduce.SUM)
        record_metric("perf/generate_s", time.monotonic() - start)
        return completions

    @endpoint
    async def update_weights(self, version: int) -> int:
        """Pause new requests, drain those in flight, load ``version`` from the store, resume."""
        start = time.monotonic()
        async with self.gate.update():
            if version == self.engine.policy_version:
                return version
            await self._load_version(version)
        record_metric("perf/weight_load_s", time.monotonic() - start)  # drain + read the store + load
        return version

    @endpoint
    async def save_state(self, path: str) -> None:
        """Write this rank's next sampling seed into ``path`` (``generator-rank<r>.json``); the
        weights are the trainer's (pushed again on resume)."""
        (Path(path) / f"generator-rank{self.rank}.json").write_text(json.dumps({"next_seed": self._next_seed}))

    @endpoint
    async def load_state(self, path: str) -> None:
        """Continue the seed sequence :meth:`save_state` recorded (a replica added since starts afresh)."""
        part = Path(path) / f"generator-rank{self.rank}.json"
        if part.is_file():
            self._next_seed = json.loads(part.read_text())["next_seed"]

    async def _load_version(self, version: int) -> None:
        if isinstance(self.engine, HFGenerationEngine):
            state_dict = await self.store.get_state_dict(weights_key(version))
            await asyncio.to_thread(self.engine.load_weights, state_dict, version)
        else:  # vllm reads the store in its own workers; openai refuses (frozen policy)
            await self.engine.update_weights(version)

    @endpoint
    async def policy_version(self) -> int:
        """The version new requests are served from."""
        return self.engine.policy_version

    @endpoint
    async def close(self) -> None:
        """Stop the engine (vLLM's processes, the HTTP client); the HF engine holds nothing to stop."""
        if not isinstance(self.engine, HFGenerationEngine):
            await self.engine.close()
