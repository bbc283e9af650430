"""Training a Hugging Face causal LM with a policy loss from :mod:`losses`.

One ``train_step`` is one optimiser step over a :class:`Batch`: rows are split into micro-batches
under a token budget, gradients accumulate with each micro-batch weighted by its share of the
loss's normaliser (tokens for token-mean, sequences otherwise), then the gradient is clipped and
AdamW steps with a warm-up + constant/linear/cosine schedule.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field, model_validator
from transformers import PreTrainedModel

from forge_kernels.config import StrictModel
from forge_kernels.types import Batch
from losses.base import PolicyLoss

__all__ = ["HFTrainingEngine", "OptimConfig"]


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

    @model_validator(mode="after")
    def _decay_needs_total(self) -> OptimConfig:
        if self.schedule != "constant" and self.total_steps is None:
            raise ValueError(f"schedule {self.schedule!r} needs total_steps")
        return self


class HFTrainingEngine:
    """Owns the model, the optimiser and the LR schedule; ``train_step`` runs one update."""

    def __init__(self, model: PreTrainedModel, optim: OptimConfig, loss: PolicyLoss, device: str = "cpu"):
        self.cfg = optim
        self.loss = loss
        self.device = torch.device(device)
        self.model = model.to(self.device, dtype=getattr(torch, optim.dtype)).train()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.step = 0

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

    def micro_batches(self, batch: Batch) -> list[slice]:
        """Contiguous row ranges whose padded size stays within ``micro_batch_tokens``."""
        per_row = batch.input_ids.shape[1]
        rows = max(1, self.cfg.micro_batch_tokens // per_row)
        return [slice(i, min(i + rows, len(batch))) for i in range(0, len(batch), rows)]

    def train_step(self, batch: Batch) -> dict[str, float]:
        """One optimiser step on ``batch``; returns the loss's metrics plus grad norm and LR."""
        self.model.train()
        mask = batch.loss_mask.bool()
        token_level = self.loss.aggregation == "token-mean"
        total = mask.sum().clamp(min=1) if token_level else torch.tensor(len(batch))
        sums: dict[str, float] = {}
        self.optimizer.zero_grad(set_to_none=True)
        for part in self.micro_batches(batch):
            share = (mask[part].sum() if token_level else torch.tensor(part.stop - part.start)) / total
            out = self._loss_on(batch, part)
            (out.loss * share).backward()
            for key, value in out.scalars().items():
                sums[key] = sums.get(key, 0.0) + value * float(share)
        params = [p for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm or float("inf"))
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        sums["train/grad_norm"] = float(norm)
        sums["train/lr"] = self.scheduler.get_last_lr()[0]
        return sums

    def _loss_on(self, batch: Batch, part: slice):
        def take(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[part].to(self.device)

        logits = self.model(input_ids=take(batch.input_ids), attention_mask=None).logits
        return self.loss(
            logits,
            take(batch.target_ids),
            take(batch.loss_mask),
            take(batch.advantages),
            take(batch.generator_logprobs),
            take(batch.ref_logprobs),
        )

    @torch.no_grad()
    def logprobs(self, batch: Batch) -> torch.Tensor:
        """Current policy's logprobs of ``batch``'s targets (0 outside the loss mask)."""
        self.model.eval()
        out = torch.zeros(batch.target_ids.shape)
        for part in self.micro_batches(batch):
            logits = self.model(input_ids=batch.input_ids[part].to(self.device)).logits.float()
            targets = batch.target_ids[part].clamp(min=0).to(self.device)
            lp = torch.log_softmax(logits / self.loss.temperature, -1).gather(-1, targets[..., None])[..., 0]
            out[part] = lp.cpu() * batch.loss_mask[part]
        self.model.train()
        return out

    def state_dict_for_push(self) -> dict[str, torch.Tensor]:
        """Hugging Face-named full tensors to publish to the generators."""
        return {k: v.detach() for k, v in self.model.state_dict().items()}
