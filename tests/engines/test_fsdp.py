"""FSDP2 in the HF training engine: world 2 on CPU (gloo) equals one process on the same batch."""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp

from actors.engines.hf_training import HFTrainingEngine, OptimConfig
from forge_kernels.distributed import DistributedConfig, destroy_process_group, free_port, init_process_group
from forge_kernels.models.tiny import TinyModelConfig, build_tiny_model, train_tokenizer
from forge_kernels.types import Batch
from losses import build_loss

CORPUS = ["offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\nmask = offs < n\n"] * 30
STEPS = 3


def make_batch(vocab: int, rows: int = 5, width: int = 24) -> Batch:
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, vocab, (rows, width), generator=g)
    mask = torch.zeros(rows, width, dtype=torch.bool)
    for r in range(rows):  # uneven response lengths, so token shares differ per rank
        mask[r, 4 + r: width - 1] = True
    targets = torch.where(mask, torch.roll(ids, -1, 1), torch.full_like(ids, -100))
    return Batch(input_ids=ids, target_ids=targets, loss_mask=mask,
                 advantages=torch.randn(rows, width, generator=g) * mask,
                 generator_logprobs=torch.full((rows, width), -3.0) * mask)


def train(world: int) -> tuple[list[dict[str, float]], dict[str, torch.Tensor]]:
    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    model = build_tiny_model(TinyModelConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128), tokenizer)
    batch = make_batch(len(tokenizer))
    # one row per micro-batch: with 5 rows over 2 ranks, rank 1 runs an idle pass each step
    optim = OptimConfig(lr=1e-2, micro_batch_tokens=batch.input_ids.shape[1], max_grad_norm=0.5)
    engine = HFTrainingEngine(model, optim, build_loss({"name": "grpo"}))
    metrics = [engine.train_step(batch) for _ in range(STEPS)]
    return metrics, engine.state_dict_for_push()


def _worker(rank: int, world: int, port: int, out_path: str) -> None:
    torch.set_num_threads(1)
    init_process_group(DistributedConfig(rank=rank, world_size=world, master_port=port, backend="gloo"))
    try:
        metrics, state = train(world)
        assert all(not hasattr(v, "placements") for v in state.values())  # full tensors on every rank
        torch.save({"metrics": metrics, "state": state}, f"{out_path}.{rank}")
    finally:
        destroy_process_group()


def test_fsdp2_world2_matches_single_process(tmp_path):
    torch.set_num_threads(1)
    ref_metrics, ref_state = train(world=1)
    mp.spawn(_worker, args=(2, free_port(), str(tmp_path / "out")), nprocs=2, join=True)
    for rank in range(2):
        got = torch.load(tmp_path / f"out.{rank}")
        assert set(got["state"]) == set(ref_state)
        for name, ref in ref_state.items():
            torch.testing.assert_close(got["state"][name], ref, rtol=1e-4, atol=1e-5, msg=name)
        for ref, mine in zip(ref_metrics, got["metrics"]):
            assert mine["train/grad_norm"] == pytest.approx(ref["train/grad_norm"], rel=1e-4)
            assert mine["loss/total"] == pytest.approx(ref["loss/total"], rel=1e-4, abs=1e-6)
    # training moved the weights, so the comparison above is not trivially of initial weights
    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    init = build_tiny_model(TinyModelConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128), tokenizer)
    assert not torch.allclose(init.state_dict()["model.layers.0.mlp.up_proj.weight"],
                              ref_state["model.layers.0.mlp.up_proj.weight"])


def test_rank_rows_partition_every_row_once():
    engine = HFTrainingEngine.__new__(HFTrainingEngine)
    for world in (1, 2, 3):
        engine.world_size = world
        for n in (1, 2, 5, 8):
            rows = [i for r in range(world) for i in range(n)[engine.rank_rows(n, r)]]
            assert rows == list(range(n))


def test_distributed_config_rejects_rank_outside_world():
    with pytest.raises(ValueError, match="rank 2 is outside a world of size 2"):
        DistributedConfig(rank=2, world_size=2)
