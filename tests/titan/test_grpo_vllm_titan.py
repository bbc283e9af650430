"""The GRPO app end to end with the real engines: vLLM generates, TorchTitan trains, weights travel
as HF-named tensors through the shm store or torchstore (configs/grpo_tiny_vllm_titan.yaml)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from actors.reward import RewardActor
from apps.grpo.config import GRPOConfig
from apps.grpo.main import run
from forge_kernels.config import load_config
from forge_kernels.env.base import Outcome
from forge_kernels.runtime import endpoint
from forge_kernels.tasks import Task
from forge_kernels.types import Completion

pytestmark = [pytest.mark.vllm, pytest.mark.titan]
CONFIG = Path(__file__).resolve().parents[2] / "configs" / "grpo_tiny_vllm_titan.yaml"


class EvenTokenReward(RewardActor):
    """Reward = share of even token ids: a dense signal a random tiny model learns (no evaluator)."""

    async def setup(self) -> None:
        pass

    @endpoint
    async def score(self, task: Task, completions: list[Completion]) -> list[Outcome]:
        return [Outcome(sum(t % 2 == 0 for t in c.token_ids) / max(len(c.token_ids), 1), False, "")
                for c in completions]

    @endpoint
    async def close(self) -> None:
        pass


@pytest.mark.parametrize("store", ["shm", "torchstore"])
def test_grpo_with_vllm_generation_and_torchtitan_training(tmp_path, store):
    """Sync mode: every step samples from the version the trainer just pushed, so the trainer's
    recomputed logprobs match vLLM's only if vLLM really loaded each pushed version (from shm, or
    from torchstore through the engine's shm staging)."""
    run_dir = tmp_path / "run"
    cfg = load_config(GRPOConfig, CONFIG, [
        f"run_dir={run_dir}", f"store.namespace=t{uuid.uuid4().hex[:8]}", f"store.root={tmp_path}/shm",
        f"metrics.backends.1.path={tmp_path}/metrics.jsonl", f"trainer.titan.checkpoint.folder={tmp_path}/dcp",
        "mode=sync", "steps=3", "save_final=true", "trainer.optim.lr=0.05", "rollout.group_size=4",
        f"store.backend={store}",
    ])
    history = asyncio.run(run(cfg, classes={"reward": EvenTokenReward}))

    assert [round(h["train/version/mean"]) for h in history] == [1, 2, 3]
    for step in history:
        assert step["train/staleness_max/max"] == 0
        # vLLM (fp32, CPU) vs TorchTitan logprobs of the same tokens under the same weights
        assert step["train/fresh_logprob_diff_max/max"] < 1e-4, step  # measured ~1e-6
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    assert sorted(p.name for p in (tmp_path / "dcp").iterdir()) == ["step-2"]  # interval 2

    # training moved the policy far beyond the mismatch tolerance, so the check above had teeth
    initial = AutoModelForCausalLM.from_pretrained(run_dir / "init_model")
    final = AutoModelForCausalLM.from_pretrained(run_dir / "final")
    ids = torch.randint(0, initial.config.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        moved = (initial(input_ids=ids).logits.log_softmax(-1) - final(input_ids=ids).logits.log_softmax(-1)).abs().max()
    assert moved > 0.05
