"""Smoke app: the foundation's end-to-end path (config -> Triton kernel -> training -> metrics).

Fits a tiny two-layer network whose activation is a Triton ReLU kernel (the interpreter on CPU,
compiled on a GPU) and logs loss per step through the configured metrics backends.

    python -m apps.smoke.main --config configs/smoke.yaml trainer.steps=20
"""

from __future__ import annotations

import os
from typing import Literal

import torch
from pydantic import Field

from forge_kernels.config import StrictModel, run_app
from forge_kernels.metrics import MetricLogger, MetricsConfig, record_metric


class TrainerSettings(StrictModel):
    lr: float = Field(default=5e-2, gt=0)
    steps: int = Field(default=60, ge=1)
    batch_size: int = Field(default=64, ge=1)
    hidden: int = Field(default=32, ge=1)


class SmokeConfig(StrictModel):
    seed: int = 0
    device: Literal["cpu", "cuda"] = "cpu"
    trainer: TrainerSettings = TrainerSettings()
    metrics: MetricsConfig = MetricsConfig()


def _triton_relu(device: str):
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede kernel decoration
    import triton
    import triton.language as tl

    @triton.jit
    def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)

    class TritonReLU(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x: torch.Tensor) -> torch.Tensor:
            x = x.contiguous()
            y = torch.empty_like(x)
            block = 4096
            relu_kernel[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), BLOCK=block)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
            (y,) = ctx.saved_tensors
            return grad * (y > 0)

    return TritonReLU.apply


def main(cfg: SmokeConfig) -> float:
    torch.manual_seed(cfg.seed)
    relu = _triton_relu(cfg.device)
    t = cfg.trainer
    dev = torch.device(cfg.device)
    w_true = torch.randn(8, 1, device=dev)
    l1, l2 = torch.nn.Linear(8, t.hidden).to(dev), torch.nn.Linear(t.hidden, 1).to(dev)
    opt = torch.optim.AdamW([*l1.parameters(), *l2.parameters()], lr=t.lr)
    logger = MetricLogger.from_config(cfg.metrics, total_steps=t.steps)
    loss_value = float("nan")
    with logger:
        for step in range(t.steps):
            x = torch.randn(t.batch_size, 8, device=dev)
            y = (x @ w_true).abs()
            loss = torch.nn.functional.mse_loss(l2(relu(l1(x))), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_value = loss.item()
            record_metric("train/loss", loss_value)
            logger.flush(step)
    return loss_value


if __name__ == "__main__":
    run_app(SmokeConfig, main, description=__doc__)
