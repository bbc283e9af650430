"""Training a Hugging Face causal LM with a policy loss from :mod:`losses` (or any :class:`TrainingLoss`).

One ``train_step`` is one optimiser step over a :class:`Batch`: rows are split into micro-batches
under a token budget, gradients accumulate with each micro-batch weighted by its share of the
loss's normaliser (tokens for token-mean, sequences otherwise), then the gradient is clipped and
AdamW steps with a warm-up + constant/linear/cosine schedule.

With a process group of more than one rank (initialised by the caller, e.g. with
:func:`forge_kernels.distributed.init_process_group`), the model is sharded with FSDP2
(``fully_shard`` per decoder layer, then the root). Every rank is handed the same *global*
batch; rank ``r`` trains on its contiguous share of the rows, and gradients are summed across
ranks with each micro-batch weighted by its share of the *global* normaliser, so one step equals
the single-process step on the same batch. :meth:`state_dict_for_push` and :meth:`logprobs`
are collectives there: call them on every rank.
"""

from __future__ import annotations

import math
from typing import Literal, Protocol

import torch
import torch.distributed as dist
from pydantic import Field, model_validator
from torch.distributed.tensor import DTensor
from transformers import PreTrainedModel

from forge_kernels.config import StrictModel
from forge_kernels.types import Batch
from losses.ops import token_logprobs, token_logprobs_from_hidden

__all__ = ["HFTrainingEngine", "OptimConfig", "TrainingLoss"]


class OptimConfig(StrictModel):
    """Optimiser, schedule and batching settings of the trainer."""

    lr: float = Field(default=1e-5, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = Field(default=0, ge=0)
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    total_steps: int | None = Field(default=None, ge=1, description="needed by linear/cosine decay")
    max_grad_norm: float | None = Field(default=1.0, gt=0)
    micro_batch_tokens: int = Field(default=4096, ge=1, description="padded tokens per micro-batch")
    dtype: Literal["float32", "bfloat16"] = "float32"
    activation_checkpointing: bool = Field(
        default=False, description="recompute each decoder layer's activations in the backward pass (HF engine): "
                                   "less memory for long batches or large models, ~1/3 more compute")

    @model_validator(mode="after")
    def _decay_needs_total(self) -> OptimConfig:
        if self.schedule != "constant" and self.total_steps is None:
            raise ValueError(f"schedule {self.schedule!r} needs total_steps")
        return self


class TrainingLoss(Protocol):
    """What the engine needs of a loss: every :class:`losses.base.PolicyLoss` is one."""

    aggregation: str  # "token-mean" normalises by tokens; anything else by sequences
    temperature: float

    def __call__(self, logits: torch.Tensor, target_ids: torch.Tensor, loss_mask: torch.Tensor,
                 advantages: torch.Tensor, generator_logprobs: torch.Tensor,
                 ref_logprobs: torch.Tensor | None = None): ...

    def from_logprobs(self, logp: torch.Tensor, entropy: torch.Tensor, metrics: dict, target_ids: torch.Tensor,
                      loss_mask: torch.Tensor, advantages: torch.Tensor, generator_logprobs: torch.Tensor,
                      ref_logprobs: torch.Tensor | None = None): ...


def _decoder_layers(model: PreTrainedModel) -> torch.nn.ModuleList:
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise TypeError(f"cannot find decoder layers to shard in {type(model).__name__} "
                        f"(expected a ModuleList at model.get_decoder().layers)")
    return layers


class HFTrainingEngine:
    """Owns the model, the optimiser and the LR schedule; ``train_step`` runs one update."""

    def __init__(self, model: PreTrainedModel, optim: OptimConfig, loss: TrainingLoss, device: str = "cpu",
                 fused_lm_head: bool = False):
        self.cfg = optim
        self.loss = loss
        self.fused_lm_head = fused_lm_head
        self.device = torch.device(device)
        self.world_size = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        self.rank = dist.get_rank() if self.world_size > 1 else 0
        self.model = model.to(self.device, dtype=getattr(torch, optim.dtype)).train()
        if optim.activation_checkpointing:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if self.world_size > 1:
            if fused_lm_head:
                raise ValueError("trainer.fused_lm_head needs the whole LM head in one process; with FSDP "
                                 f"(procs={self.world_size}) leave it off")
            self._shard()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.step = 0

    @property
    def sharded(self) -> bool:
        return self.world_size > 1

    def _shard(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, fully_shard

        mesh = init_device_mesh(self.device.type, (self.world_size,))
        for layer in _decoder_layers(self.model):
            fully_shard(layer, mesh=mesh)
        fully_shard(self.model, mesh=mesh)
        for module in self.model.modules():  # these setters do not recurse
            if isinstance(module, FSDPModule):
                # Sum, don't average: each rank's loss is already weighted by its share of the
                # global normaliser. Plain SUM collectives: gloo has no PREMUL_SUM.
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)

    def _lr_factor(self, step: int) -> float:
        if step < self.cfg.warmup_steps:
            return (step + 1) / self.cfg.warmup_steps
        if self.cfg.schedule == "constant":
            return 1.0
        total = max(self.cfg.total_steps - self.cfg.warmup_steps, 1)  # type: ignore[operator]
        progress = min((step - self.cfg.warmup_steps) / total, 1.0)
        if self.cfg.schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    def micro_batches(self, batch: Batch, rows: slice | None = None) -> list[slice]:
        """Contiguous row ranges (within ``rows``, default all) whose padded size stays within
        ``micro_batch_tokens``."""
        rows = rows or slice(0, len(batch))
        per_row = batch.input_ids.shape[1]
        step = max(1, self.cfg.micro_batch_tokens // per_row)
        return [slice(i, min(i + step, rows.stop)) for i in range(rows.start, rows.stop, step)]

    def rank_rows(self, n_rows: int, rank: int | None = None) -> slice:
        """The contiguous rows of a global batch of ``n_rows`` that ``rank`` trains on."""
        rank = self.rank if rank is None else rank
        base, extra = divmod(n_rows, self.world_size)
        start = rank * base + min(rank, extra)
        return slice(start, start + base + (rank < extra))

    def train_step(self, batch: Batch) -> dict[str, float]:
        """One optimiser step on ``batch`` (the global batch, on every rank when sharded);
        returns the loss's metrics plus grad norm and LR."""
        self.model.train()
        mask = batch.loss_mask.bool()
        token_level = self.loss.aggregation == "token-mean"
        total = mask.sum().clamp(min=1) if token_level else torch.tensor(len(batch))
        parts = self.micro_batches(batch, self.rank_rows(len(batch)))
        # FSDP: every rank must run as many forward/backward passes as the busiest one
        n_passes = max(len(self.micro_batches(batch, self.rank_rows(len(batch), r))) for r in range(self.world_size))
        sums: dict[str, float] = {}
        self.optimizer.zero_grad(set_to_none=True)
        for i in range(n_passes):
            if i < len(parts):
                part = parts[i]
                share = (mask[part].sum() if token_level else torch.tensor(part.stop - part.start)) / total
            else:  # idle rank: a zero-weighted pass keeps the collectives in step
                part, share = slice(0, 1), torch.tensor(0.0)
            if self.sharded:
                self.model.set_requires_gradient_sync(i == n_passes - 1)
            out = self._loss_on(batch, part)
            (out.loss * share.to(self.device)).backward()
            for key, value in out.scalars().items():
                sums[key] = sums.get(key, 0.0) + value * float(share)
        params = [p for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm or float("inf"))
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        if self.sharded:
            sums = self._sum_over_ranks(sums)
        sums["train/grad_norm"] = float(norm)
        sums["train/lr"] = self.scheduler.get_last_lr()[0]
        return sums

    def _sum_over_ranks(self, sums: dict[str, float]) -> dict[str, float]:
        keys = sorted(sums)
        values = torch.tensor([sums[k] for k in keys], dtype=torch.float64, device=self.device)
        dist.all_reduce(values)
        return dict(zip(keys, values.tolist()))

    def _loss_on(self, batch: Batch, part: slice):
        def take(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[part].to(self.device)

        args = (take(batch.target_ids), take(batch.loss_mask), take(batch.advantages),
                take(batch.generator_logprobs), take(batch.ref_logprobs))
        if self.fused_lm_head:  # logprobs straight from the hidden states: no [B, T, V] logits
            (logp, entropy), metrics = self._scores_from_hidden(take(batch.input_ids), args[0])
            return self.loss.from_logprobs(logp, entropy, metrics, *args)
        logits = self.model(input_ids=take(batch.input_ids), attention_mask=None).logits
        return self.loss(logits, *args)

    def _scores_from_hidden(self, input_ids: torch.Tensor, target_ids: torch.Tensor):
        hidden = self.model.get_decoder()(input_ids=input_ids).last_hidden_state
        weight = self.model.get_output_embeddings().weight
        return token_logprobs_from_hidden(hidden, weight, target_ids, self.loss.temperature,
                                          getattr(self.loss, "ignore_index", -100))

    @torch.no_grad()
    def logprobs(self, batch: Batch) -> torch.Tensor:
        """Current policy's logprobs of ``batch``'s targets (0 outside the loss mask).

        Sharded: a collective; every rank computes (and returns) all rows.
        """
        self.model.eval()
        out = torch.zeros(batch.target_ids.shape)
        for part in self.micro_batches(batch):
            ids = batch.input_ids[part].to(self.device)
            targets = batch.target_ids[part].clamp(min=0).to(self.device)
            if self.fused_lm_head:
                (lp, _), _ = self._scores_from_hidden(ids, targets)
            else:
                (lp, _), _ = token_logprobs(self.model(input_ids=ids).logits, targets, self.loss.temperature)
            out[part] = lp.float().cpu() * batch.loss_mask[part]
        self.model.train()
        return out

    def state_dict_for_push(self) -> dict[str, torch.Tensor]:
        """Hugging Face-named full tensors to publish to the generators (or to save).

        Sharded: a collective (each parameter is all-gathered); every rank must call it and every
        rank gets the full tensors.
        """
        return {
            k: (v.full_tensor() if isinstance(v, DTensor) else v).detach()
            for k, v in self.model.state_dict().items()
        }
