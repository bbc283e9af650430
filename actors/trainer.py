"""The trainer actor: one optimiser step per batch of episodes, weights published to the store.

``engine`` picks what trains: ``hf`` (a ``transformers`` model, FSDP2 when sharded) or
``torchtitan`` (TorchTitan's qwen3/llama3 with its parallelisms and DCP checkpoints, settings under
``titan``); both publish Hugging Face-named weights and take the same losses.

``train_step(episodes)`` collates the turns (the generator's own token ids), optionally
recomputes the current policy's logprobs first to measure the generator/trainer mismatch
(slime's invariant: for samples of the trainer's current version it must be ~0), then runs the
engine's step with the configured loss. ``push_weights(v)`` writes the weights under
``weights/v<v>`` and deletes versions older than ``keep_versions``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field, model_validator

from actors.common import load_model, load_tokenizer, set_torch_threads
from actors.engines.batching import collate_turns
from actors.engines.hf_training import HFTrainingEngine, OptimConfig
from actors.engines.titan_training import TitanConfig, TitanTrainingEngine
from forge_kernels.config import StrictModel
from forge_kernels.metrics import Reduce, record_metric
from forge_kernels.distributed import DistributedConfig, init_process_group
from forge_kernels.runtime import Actor, endpoint
from forge_kernels.store import StoreConfig, build_store, weights_key
from forge_kernels.types import Batch, Episode
from losses import GRPOLoss, LossSpec

__all__ = ["Trainer", "logprob_mismatch"]


def logprob_mismatch(batch: Batch, trainer_logprobs: torch.Tensor, version: int) -> dict[str, float]:
    """|trainer - generator| logprob over sampled tokens: all rows, and rows of ``version`` only."""
    diff = (trainer_logprobs - batch.generator_logprobs).abs()
    mask = batch.loss_mask.bool()
    out = {"train/logprob_diff_mean": float(diff[mask].mean()), "train/logprob_diff_max": float(diff[mask].max())}
    fresh = torch.tensor([v == version for v in batch.policy_versions])[:, None] & mask
    if fresh.any():
        out["train/fresh_logprob_diff_max"] = float(diff[fresh].max())
    return out


class Trainer(Actor):
    """A causal LM + AdamW + the configured loss (:class:`HFTrainingEngine` or :class:`TitanTrainingEngine`)."""

    class Config(StrictModel):
        model_path: str = Field(default="", description="checkpoint to start from (model + tokenizer); the GRPO app fills it in")
        device: str = "cpu"
        engine: Literal["hf", "torchtitan"] = "hf"
        titan: TitanConfig = Field(default_factory=TitanConfig, description="settings of engine: torchtitan")
        optim: OptimConfig = OptimConfig()
        loss: LossSpec = Field(default_factory=GRPOLoss)
        store: StoreConfig = StoreConfig()
        keep_versions: int = Field(default=2, ge=1, description="published versions kept in the store")
        log_mismatch: bool = Field(default=True, description="recompute logprobs before each step (one forward)")
        max_restarts: int = Field(
            default=2, ge=0, description="the GRPO app's budget of recoveries: when an actor's process dies, the run "
                                         "resumes from the newest checkpoint (needs checkpoint.interval)")
        fused_lm_head: bool = Field(
            default=False, description="score tokens from the last hidden states and the LM head in vocabulary "
                                       "chunks, never materialising [B, T, V] logits (HF engine, one process)")
        torch_threads: int | None = Field(default=None, ge=1)
        master_port: int | None = Field(
            default=None, ge=1, le=65535,
            description="rank 0's port when the trainer runs as several processes (runtime procs > 1); "
                        "the GRPO app picks a free one")

        @model_validator(mode="after")
        def _fused_lm_head_needs_hf(self) -> Trainer.Config:
            if self.fused_lm_head and self.engine != "hf":
                raise ValueError("trainer.fused_lm_head is for engine: hf (TorchTitan's model applies its own "
                                 "output layer); leave it off with engine: torchtitan")
            return self

    async def setup(self) -> None:
        cfg = self.config
        set_torch_threads(cfg.torch_threads)
        if self.size > 1:  # one rank per process: FSDP2 (and TP with TorchTitan) over the group
            if cfg.master_port is None:
                raise ValueError(f"a trainer of {self.size} processes needs trainer.master_port (rank 0's port)")
            init_process_group(DistributedConfig(rank=self.rank, world_size=self.size, master_port=cfg.master_port))
        self.tokenizer = load_tokenizer(cfg.model_path)
        self.engine = self._build_engine()
        self.store = build_store(cfg.store)
        # the policy version the current weights are, counted from this run's start (a TorchTitan
        # engine resuming a DCP checkpoint restores its step and LR schedule; version 0 is those weights)
        self.version = 0

    def _build_engine(self) -> HFTrainingEngine:
        cfg = self.config
        if cfg.engine == "hf":
            return HFTrainingEngine(load_model(cfg.model_path), cfg.optim, cfg.loss, cfg.device, cfg.fused_lm_head)
        try:
            import torchtitan.distributed.fsdp  # noqa: F401  (the part that needs a recent torch)
        except ImportError as err:
            raise ImportError(f"trainer.engine: torchtitan needs torchtitan==0.3.0 on torch >= 2.12 (this is torch "
                              f"{torch.__version__}): pip install 'forge-kernels[titan]', or scripts/install_vllm.sh "
                              f"({err})") from err
        return TitanTrainingEngine(cfg.model_path, cfg.optim, cfg.loss, cfg.device, cfg.titan)

    @endpoint
    async def train_step(self, episodes: list[Episode]) -> dict[str, float]:
        """One optimiser step on ``episodes`` (advantages filled in); returns its metrics."""
        batch = collate_turns(episodes, pad_id=self.tokenizer.pad_token_id, ignore_index=self.config.loss.ignore_index)
        if self.config.loss.beta > 0 and batch.ref_logprobs is None:
            raise ValueError(f"loss has beta={self.config.loss.beta} but the episodes carry no ref_logprobs")
        metrics = await asyncio.to_thread(self._step, batch)
        ages = [self.version - v for v in batch.policy_versions]
        metrics["train/staleness_mean"] = sum(ages) / len(ages)
        metrics["train/staleness_max"] = float(max(ages))
        metrics["train/tokens"] = float(batch.loss_mask.sum())
        self.version += 1
        metrics["train/version"] = float(self.version)
        return metrics

    def _step(self, batch: Batch) -> dict[str, float]:
        metrics: dict[str, float] = {}
        if self.config.log_mismatch:
            metrics.update(logprob_mismatch(batch, self.engine.logprobs(batch), self.version))
        metrics.update(self.engine.train_step(batch))
        return metrics

    @endpoint
    async def push_weights(self, version: int) -> int:
        """Publish the current weights as ``version``; drop versions older than ``keep_versions``."""
        if version != self.version:
            raise ValueError(f"asked to push version {version} but the trainer's weights are version {self.version}")
        start = time.monotonic()
        state = await asyncio.to_thread(self.engine.state_dict_for_push)  # a collective when sharded
        if self.rank != 0:
            return version
        await self.store.put_state_dict(state, weights_key(version))
        record_metric("perf/weight_push_s", time.monotonic() - start)
        device = torch.device(self.config.device)
        if device.type == "cuda":
            record_metric("perf/trainer_peak_gpu_gib", torch.cuda.max_memory_allocated(device) / 2**30, Reduce.MAX)
        for key in await self.store.keys("weights/v"):
            if int(key.rsplit("v", 1)[1]) <= version - self.config.keep_versions:
                await self.store.delete(key)
        return version

    @endpoint
    async def save_state(self, path: str) -> None:
        """Write the engine's weights, optimiser, schedule and step, the policy version and this
        process's RNG into checkpoint directory ``path`` (``trainer.pt``)."""
        if self.config.engine != "hf":
            raise ValueError("full-state checkpoints cover engine: hf; engine: torchtitan checkpoints itself with "
                             "trainer.titan.checkpoint (DCP)")
        state = await asyncio.to_thread(self.engine.checkpoint_state)
        if self.rank == 0:
            payload = {**state, "version": self.version, "torch_rng": torch.get_rng_state()}
            await asyncio.to_thread(torch.save, payload, Path(path) / "trainer.pt")

    @endpoint
    async def load_state(self, path: str) -> int:
        """Restore :meth:`save_state`'s checkpoint; returns the policy version it holds."""
        part = Path(path) / "trainer.pt"
        try:
            payload = await asyncio.to_thread(torch.load, part, map_location=self.config.device, weights_only=False)
            rng = payload.pop("torch_rng")
            version = int(payload.pop("version"))
            self.engine.load_checkpoint_state(payload)
        except (RuntimeError, KeyError, EOFError, ValueError, OSError) as err:
            raise ValueError(f"checkpoint {str(path)!r}: cannot restore the trainer from {part.name}: "
                             f"{str(err).splitlines()[0][:300]}") from err
        torch.set_rng_state(rng.cpu() if hasattr(rng, "cpu") else rng)
        self.version = version
        return version

    @endpoint
    async def current_version(self) -> int:
        return self.version

    @endpoint
    async def save(self, path: str) -> str:
        """Write the current model and tokenizer as a Hugging Face checkpoint directory."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        if isinstance(self.engine, TitanTrainingEngine):
            await asyncio.to_thread(self.engine.save_pretrained, out)  # a collective; rank 0 writes
        elif self.size > 1:
            state = await asyncio.to_thread(self.engine.state_dict_for_push)  # full tensors, a collective
            if self.rank == 0:
                self.engine.model.save_pretrained(out, state_dict=state)
        else:
            self.engine.model.save_pretrained(out)
        if self.rank == 0:
            self.tokenizer.save_pretrained(out)
        return str(out)
