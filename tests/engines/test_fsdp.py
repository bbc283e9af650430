"""FSDP2 in the HF training engine: world 2 on CPU (gloo) equals one process on the same batch.

The two runs compute the same math in other summation orders (each rank sums its rows, gloo sums
the ranks), so they agree within the fp32 reordering bound, not bitwise. They step with SGD:
AdamW's first update is lr * g / (|g| + eps), which turns a 1e-10 reordering difference in a
gradient near 0 into a 1e-4 weight difference, on some CPUs and not others; SGD's update is
linear in the gradient, so the weights differ by at most lr * (gradient difference) per step."""

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
SHAPE = TinyModelConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128)
ROWS, WIDTH = 5, 24
OPTIM = OptimConfig(lr=1e-2, micro_batch_tokens=WIDTH, max_grad_norm=0.5)  # one row per micro-batch


def make_batch(vocab: int, rows: int = ROWS, width: int = WIDTH) -> Batch:
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, vocab, (rows, width), generator=g)
    mask = torch.zeros(rows, width, dtype=torch.bool)
    for r in range(rows):  # uneven response lengths, so token shares differ per rank
        mask[r, 4 + r: width - 1] = True
    targets = torch.where(mask, torch.roll(ids, -1, 1), torch.full_like(ids, -100))
    return Batch(input_ids=ids, target_ids=targets, loss_mask=mask,
                 advantages=torch.randn(rows, width, generator=g) * mask,
                 generator_logprobs=torch.full((rows, width), -3.0) * mask)


def train(world: int) -> tuple[list[dict[str, float]], dict[str, torch.Tensor], float]:
    """Metrics per step, the final weights, and the sum over steps of each step's largest weight change."""
    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    model = build_tiny_model(SHAPE, tokenizer)
    batch = make_batch(len(tokenizer))
    # one row per micro-batch: with 5 rows over 2 ranks, rank 1 runs an idle pass each step
    engine = HFTrainingEngine(model, OPTIM, build_loss({"name": "grpo"}))
    engine.optimizer = torch.optim.SGD(engine.model.parameters(), lr=OPTIM.lr)  # see the module docstring
    engine.scheduler = torch.optim.lr_scheduler.LambdaLR(engine.optimizer, engine._lr_factor)
    def weights() -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in engine.state_dict_for_push().items()}

    metrics, moved, before = [], 0.0, weights()
    for _ in range(STEPS):
        metrics.append(engine.train_step(batch))
        after = weights()
        moved += max(float((after[k] - before[k]).abs().max()) for k in after)
        before = after
    return metrics, before, moved


def _worker(rank: int, world: int, port: int, out_path: str) -> None:
    torch.set_num_threads(1)
    init_process_group(DistributedConfig(rank=rank, world_size=world, master_port=port, backend="gloo"))
    try:
        metrics, state, _ = train(world)
        assert all(not hasattr(v, "placements") for v in state.values())  # full tensors on every rank
        torch.save({"metrics": metrics, "state": state}, f"{out_path}.{rank}")
    finally:
        destroy_process_group()


def test_fsdp2_world2_matches_single_process(tmp_path, reorder_tolerance):
    torch.set_num_threads(1)
    ref_metrics, ref_state, moved = train(world=1)
    mp.spawn(_worker, args=(2, free_port(), str(tmp_path / "out")), nprocs=2, join=True)
    # the chain of reductions behind one gradient entry: the batch's tokens, the micro-batch and
    # rank sums, the vocabulary, and per layer the MLP width, four hidden-width products and the
    # attention over a row
    depth = ROWS * WIDTH + ROWS + 2 + 300 + SHAPE.num_hidden_layers * (
        SHAPE.intermediate_size + 4 * SHAPE.hidden_size + WIDTH)
    tol = reorder_tolerance(depth)
    # an SGD step is lr * (clipped gradient), so reordering changes each step's update by at most
    # tol of its largest entry; over the steps that adds up to tol * moved (2x for the second-order
    # feedback of slightly different weights on the next steps' gradients). And w + update rounds
    # to w's ulp, so an update a hair different can land one ulp away: eps * |w| per step.
    weight_atol, weight_rtol = 2 * tol * moved, STEPS * torch.finfo(torch.float32).eps
    assert moved > 0 and weight_atol < 1e-2 * moved  # a tolerance far below what training moved
    for rank in range(2):
        got = torch.load(tmp_path / f"out.{rank}")
        assert set(got["state"]) == set(ref_state)
        for name, ref in ref_state.items():
            torch.testing.assert_close(got["state"][name], ref, rtol=weight_rtol, atol=weight_atol, msg=name)
        for ref, mine in zip(ref_metrics, got["metrics"], strict=True):
            assert mine["train/grad_norm"] == pytest.approx(ref["train/grad_norm"], rel=tol)
            assert mine["loss/total"] == pytest.approx(ref["loss/total"], rel=tol)


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
