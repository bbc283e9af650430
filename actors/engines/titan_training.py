"""Training a TorchTitan model (qwen3 or llama3) with a policy loss, HF weights in and out.

The model comes from TorchTitan's registry, sized from the HF checkpoint's ``config.json``
(:mod:`actors.engines.titan_model`), is built on the meta device, parallelised with the family's
``parallelize_*`` (FSDP2 over ``dp_shard``; TP over ``tp`` on GPUs), materialised, and filled
from the HF safetensors through TorchTitan's state-dict adapter. The step itself — micro-batches
under a token budget, each weighted by its share of the loss's global normaliser, idle passes
for ranks with fewer micro-batches, clipping, AdamW and the LR schedule — is
:class:`~actors.engines.hf_training.HFTrainingEngine`'s, so both engines give the same update
for the same weights and batch; only the forward pass and the weight export differ.

:meth:`state_dict_for_push` returns HF-named full tensors (the adapter's ``to_hf``), which the
vLLM engine and ``transformers`` load as they are. With ``checkpoint.folder`` set, TorchTitan's
DCP ``CheckpointManager`` saves ``step-N`` folders every ``interval`` steps and a restarted
engine resumes from the newest one.

TorchTitan needs a process group even for one process: if none is initialised, the engine
joins a single-rank gloo (CPU) or nccl (CUDA) group. With more ranks, initialise the group first
(:func:`forge_kernels.distributed.init_process_group`) and call every method on every rank.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Literal

import torch
import torch.distributed as dist
from pydantic import Field, model_validator
from torch.distributed.tensor import DTensor
from transformers import AutoConfig

from actors.engines import titan_cpu
from actors.engines.hf_training import HFTrainingEngine, OptimConfig, TrainingLoss
from actors.engines.titan_checkpoint import build_checkpoint_manager, load_hf_weights
from actors.engines.titan_model import titan_model_spec
from forge_kernels.config import StrictModel
from forge_kernels.distributed import DistributedConfig, free_port, init_process_group
from forge_kernels.types import Batch
from losses.ops import token_logprobs

__all__ = ["TitanCheckpointConfig", "TitanConfig", "TitanTrainingEngine"]


class TitanCheckpointConfig(StrictModel):
    """TorchTitan DCP checkpoints: ``folder/step-N``; a restart resumes from the newest."""

    folder: str = Field(default="", description="empty: no DCP checkpoints")
    interval: int = Field(default=10, ge=1, description="save every this many optimiser steps")
    keep_latest_k: int = Field(default=0, ge=0, description="0 keeps all; otherwise at least 2")

    @model_validator(mode="after")
    def _two_or_all(self) -> TitanCheckpointConfig:
        if self.keep_latest_k == 1:
            raise ValueError("keep_latest_k must be 0 (keep all) or at least 2 (the newest may still be written)")
        return self


class TitanConfig(StrictModel):
    """TorchTitan-specific trainer settings (``trainer.titan`` in YAML)."""

    family: Literal["auto", "qwen3", "llama3"] = Field(default="auto", description="auto: from config.json's model_type")
    attention: Literal["auto", "sdpa", "flex"] = Field(
        default="auto", description="auto: sdpa on CPU (flex has no CPU backward), flex on GPUs")
    fuse_qkv: bool = Field(default=True, description="one wqkv matmul (TorchTitan's default); HF names either way")
    dp_shard: int = Field(default=-1, description="FSDP2 degree; -1: the ranks TP leaves")
    tp: int = Field(default=1, ge=1, description="tensor-parallel degree (GPUs)")
    checkpoint: TitanCheckpointConfig = TitanCheckpointConfig()

    @model_validator(mode="after")
    def _dp_shard_valid(self) -> TitanConfig:
        if self.dp_shard == 0 or self.dp_shard < -1:
            raise ValueError(f"dp_shard must be -1 (all remaining ranks) or >= 1, got {self.dp_shard}")
        return self


def _join_single_rank_group(device: torch.device) -> None:
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        init_process_group(DistributedConfig(rank=0, world_size=1, master_port=free_port(), backend=backend))


class TitanTrainingEngine(HFTrainingEngine):
    """Owns the TorchTitan model, AdamW and the LR schedule; ``train_step`` runs one update."""

    def __init__(self, model_path: str | Path, optim: OptimConfig, loss: TrainingLoss,
                 device: str = "cpu", titan: TitanConfig = TitanConfig()):
        from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
        from torchtitan.distributed import ParallelDims

        self.cfg, self.loss, self.titan = optim, loss, titan
        self.device = torch.device(device)
        self.model_path = str(model_path)
        self.hf_config = AutoConfig.from_pretrained(self.model_path)
        spec = titan_model_spec(self.hf_config, None if titan.family == "auto" else titan.family, titan.fuse_qkv)
        self.attention = titan.attention if titan.attention != "auto" else ("sdpa" if self.device.type == "cpu" else "flex")
        if self.attention == "sdpa":
            titan_cpu.use_sdpa_attention(spec.model.layers)
        if self.device.type == "cpu":
            if titan.tp > 1:
                raise ValueError(f"tp={titan.tp}: tensor parallelism is for GPUs; on CPU use dp_shard")
            titan_cpu.use_cpu_device_type()
        _join_single_rank_group(self.device)

        # partial_dtensor: DTensors for the model-parallel axes only, FSDP2 over the rest (0.3.0's
        # spmd_types default wants every parameter pre-distributed on the full mesh)
        parallelism = ParallelismConfig(data_parallel_shard_degree=titan.dp_shard,
                                        tensor_parallel_degree=titan.tp, spmd_backend="partial_dtensor")
        self.parallel_dims = ParallelDims.from_config(parallelism, dist.get_world_size())
        self.parallel_dims.build_mesh()
        spec.model.update_from_config(config=SimpleNamespace(parallelism=parallelism))
        with torch.device("meta"):
            model = spec.model.build().to(getattr(torch, optim.dtype))
        model = spec.parallelize_fn(
            model, parallel_dims=self.parallel_dims, parallelism=parallelism,
            training=TrainingConfig(mixed_precision_param=optim.dtype), compile_config=CompileConfig(),
            ac_config=None, dump_folder="",
        )
        if self.device.type == "cpu":
            titan_cpu.use_sum_reduction(model)
        model.to_empty(device=self.device)
        with torch.no_grad():
            model.init_states(buffer_device=self.device)  # RoPE caches (weights come next)
        self.adapter = spec.state_dict_adapter(spec.model, self.model_path)
        load_hf_weights(model, self.adapter, self.model_path)
        self.model = model.train()

        # data parallelism is over the "batch" axis (TP ranks of one group see the same rows)
        self._batch_mesh = self.parallel_dims.get_optional_mesh("batch")
        self.world_size = self.parallel_dims.dp_replicate * self.parallel_dims.dp_shard
        self.rank = self._batch_mesh.get_local_rank() if self.world_size > 1 else 0
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=optim.lr, betas=optim.betas,
                                           weight_decay=optim.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.step = 0
        ckpt = titan.checkpoint
        self.checkpointer = (build_checkpoint_manager(self, ckpt.folder, ckpt.interval, ckpt.keep_latest_k)
                             if ckpt.folder else None)
        if self.checkpointer is not None:
            self.checkpointer.load()  # resumes from folder/step-N when there is one

    def _logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        ids = input_ids.to(self.device)
        if self.attention == "flex":
            positions = torch.arange(ids.shape[1], device=self.device).expand_as(ids)
            out = self.model(ids, positions, self.model.get_attention_masks(positions))
        else:
            out = self.model(ids)
        return out.full_tensor() if isinstance(out, DTensor) else out

    def _loss_on(self, batch: Batch, part: slice):
        def take(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[part].to(self.device)

        return self.loss(self._logits(batch.input_ids[part]), take(batch.target_ids), take(batch.loss_mask),
                         take(batch.advantages), take(batch.generator_logprobs), take(batch.ref_logprobs))

    @torch.no_grad()
    def logprobs(self, batch: Batch) -> torch.Tensor:
        """Current policy's logprobs of ``batch``'s targets (0 outside the loss mask); a collective."""
        self.model.eval()
        out = torch.zeros(batch.target_ids.shape)
        for part in self.micro_batches(batch):
            targets = batch.target_ids[part].clamp(min=0).to(self.device)
            (lp, _), _ = token_logprobs(self._logits(batch.input_ids[part]), targets, self.loss.temperature)
            out[part] = lp.float().cpu() * batch.loss_mask[part]
        self.model.train()
        return out

    def train_step(self, batch: Batch) -> dict[str, float]:
        """One optimiser step (see :meth:`HFTrainingEngine.train_step`), then a DCP checkpoint
        when ``checkpoint.interval`` says so."""
        metrics = super().train_step(batch)
        if self.checkpointer is not None:
            self.checkpointer.save(self.step)
        return metrics

    def _sum_over_ranks(self, sums: dict[str, float]) -> dict[str, float]:
        keys = sorted(sums)
        values = torch.tensor([sums[k] for k in keys], dtype=torch.float64, device=self.device)
        dist.all_reduce(values, group=self._batch_mesh.get_group())
        return dict(zip(keys, values.tolist()))

    def save_checkpoint(self) -> None:
        """Write a DCP checkpoint of the current step now (a collective); needs ``checkpoint.folder``."""
        if self.checkpointer is None:
            raise ValueError("save_checkpoint needs titan.checkpoint.folder to be set")
        self.checkpointer.save(self.step, last_step=True)
        self.checkpointer.maybe_wait_for_saving()

    def state_dict_for_push(self) -> dict[str, torch.Tensor]:
        """Hugging Face-named full tensors (TorchTitan's adapter); a collective when sharded.

        Tied embeddings are published under both names, like ``transformers``' own state dict.
        """
        state = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach()
                 for k, v in self.model.state_dict().items()}
        hf_state = self.adapter.to_hf(state)
        if self.hf_config.tie_word_embeddings:
            hf_state["lm_head.weight"] = hf_state["model.embed_tokens.weight"]
        return hf_state

    def save_pretrained(self, path: str | Path) -> None:
        """Write the weights as a Hugging Face checkpoint directory (rank 0 writes; a collective)."""
        from safetensors.torch import save_file

        state = self.state_dict_for_push()
        if dist.get_rank() != 0:
            return
        if self.hf_config.tie_word_embeddings:
            state.pop("lm_head.weight")  # transformers re-ties it; safetensors refuses shared storage
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in state.items()}, path / "model.safetensors", metadata={"format": "pt"})
        self.hf_config.save_pretrained(path)
