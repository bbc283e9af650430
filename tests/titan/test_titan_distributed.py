"""The TorchTitan engine sharded with FSDP2 over two gloo ranks (real processes) equals one process:
logits after the adapter, three optimiser steps, the HF-named push, and DCP checkpoints that resume
on two ranks and reshard onto one."""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp
from transformers import AutoModelForCausalLM

from actors.engines.hf_training import HFTrainingEngine, OptimConfig
from actors.engines.titan_training import TitanConfig, TitanTrainingEngine
from forge_kernels.distributed import DistributedConfig, destroy_process_group, free_port, init_process_group
from losses import build_loss

pytestmark = pytest.mark.titan
# one row per micro-batch: with 5 rows over 2 ranks, rank 1 runs an idle pass each step
OPTIM = OptimConfig(lr=1e-2, micro_batch_tokens=24, max_grad_norm=0.5, warmup_steps=2)
STEPS = 3


def _worker(rank: int, port: int, checkpoint: str, ckpt_dir: str, batch, out: str) -> None:
    torch.set_num_threads(1)
    init_process_group(DistributedConfig(rank=rank, world_size=2, master_port=port, backend="gloo"))
    try:
        titan = TitanConfig(checkpoint={"folder": ckpt_dir, "interval": 2})
        engine = TitanTrainingEngine(checkpoint, OPTIM, build_loss({"name": "grpo"}), titan=titan)
        assert engine.world_size == 2 and engine.rank == rank
        local = next(p for p in engine.model.parameters()).to_local()
        engine.model.eval()
        with torch.no_grad():
            logits = engine._logits(batch.input_ids)
        engine.model.train()
        metrics = [engine.train_step(batch) for _ in range(STEPS)]  # step-2 is saved on the way
        state = engine.state_dict_for_push()
        resumed = TitanTrainingEngine(checkpoint, OPTIM, build_loss({"name": "grpo"}), titan=titan)
        resumed_step = resumed.step
        resumed.train_step(batch)
        torch.save({"logits": logits, "metrics": metrics, "state": state, "local_rows": local.shape[0],
                    "resumed_step": resumed_step, "resumed_state": resumed.state_dict_for_push()}, f"{out}.{rank}")
    finally:
        destroy_process_group()


def test_world2_matches_one_process_and_resumes(qwen3_checkpoint, batch_for, tmp_path, record_property):
    torch.set_num_threads(1)
    hf_model = AutoModelForCausalLM.from_pretrained(qwen3_checkpoint)
    batch = batch_for(hf_model.config.vocab_size)
    with torch.no_grad():
        hf_logits = hf_model(input_ids=batch.input_ids).logits
    hf = HFTrainingEngine(hf_model, OPTIM, build_loss({"name": "grpo"}))
    hf_metrics = [hf.train_step(batch) for _ in range(2)]
    hf_state_at_2 = {k: v.clone() for k, v in hf.state_dict_for_push().items()}
    hf_metrics.append(hf.train_step(batch))
    hf_state = hf.state_dict_for_push()

    ckpt_dir = str(tmp_path / "dcp")
    mp.spawn(_worker, args=(free_port(), qwen3_checkpoint, ckpt_dir, batch, str(tmp_path / "out")), nprocs=2, join=True)
    vocab = hf_model.config.vocab_size
    for rank in range(2):
        got = torch.load(tmp_path / f"out.{rank}")
        assert got["local_rows"] < vocab  # really sharded: each rank holds part of the embedding
        diff = float((got["logits"] - hf_logits).abs().max())
        record_property(f"world2_rank{rank}_max_logit_diff", diff)
        print(f"world 2, rank {rank}: max |logit diff| vs HF = {diff:.3g}")
        assert diff < 1e-5
        for mine, ref in zip(got["metrics"], hf_metrics):
            assert mine["loss/total"] == pytest.approx(ref["loss/total"], rel=1e-4, abs=1e-6)
            assert mine["train/grad_norm"] == pytest.approx(ref["train/grad_norm"], rel=1e-4)
        assert set(got["state"]) == set(hf_state)
        for name, ref in hf_state.items():
            torch.testing.assert_close(got["state"][name], ref, rtol=1e-4, atol=1e-5, msg=name)
            torch.testing.assert_close(got["resumed_state"][name], got["state"][name], rtol=0, atol=1e-6, msg=name)
        assert got["resumed_step"] == 2

    # the two-rank DCP checkpoint reshards onto one process
    one = TitanTrainingEngine(qwen3_checkpoint, OPTIM, build_loss({"name": "grpo"}),
                              titan=TitanConfig(checkpoint={"folder": ckpt_dir, "interval": 2}))
    assert one.step == 2
    for name, ref in one.state_dict_for_push().items():
        torch.testing.assert_close(ref, hf_state_at_2[name], rtol=1e-4, atol=1e-5, msg=name)
