"""The TorchTitan training engine in one process: same updates as the HF engine, HF-named pushes,
DCP checkpoint resume, and the Trainer actor driving it."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from actors.engines.hf_training import HFTrainingEngine, OptimConfig
from actors.engines.titan_training import TitanConfig, TitanTrainingEngine
from losses import build_loss, loss_names

pytestmark = pytest.mark.titan
OPTIM = OptimConfig(lr=1e-2, micro_batch_tokens=48, max_grad_norm=0.5)  # 2 rows per micro-batch


@pytest.fixture(scope="module")
def engines(qwen3_checkpoint):
    """A TorchTitan and an HF engine on the same weights (rebuilt weights per test via reset)."""
    loss = build_loss({"name": "grpo"})
    return (TitanTrainingEngine(qwen3_checkpoint, OPTIM, loss),
            HFTrainingEngine(AutoModelForCausalLM.from_pretrained(qwen3_checkpoint), OPTIM, loss))


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert set(a) == set(b)
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.parametrize("loss_name", loss_names())
def test_every_loss_steps_like_the_hf_engine(engines, loss_name, batch_for):
    titan, hf = engines
    titan.loss = hf.loss = build_loss({"name": loss_name})
    batch = batch_for(titan.hf_config.vocab_size)
    # the engines share weights up to float32 summation order, which drifts slowly as they train
    assert float((titan.logprobs(batch) - hf.logprobs(batch)).abs().max()) < 1e-4
    before = {k: v.clone() for k, v in titan.state_dict_for_push().items()}
    ours, theirs = titan.train_step(batch), hf.train_step(batch)
    for key in ("loss/total", "train/grad_norm", "train/lr"):
        assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), key
    after = titan.state_dict_for_push()
    assert _max_diff(after, hf.state_dict_for_push()) < 1e-4
    assert _max_diff(after, before) > 1e-4  # the step moved the weights


def test_training_reduces_the_loss_on_a_fixed_batch(qwen3_checkpoint, batch_for):
    engine = TitanTrainingEngine(qwen3_checkpoint, OPTIM, build_loss({"name": "grpo"}))
    batch = batch_for(engine.hf_config.vocab_size)
    losses = [engine.train_step(batch)["loss/total"] for _ in range(4)]
    assert losses[-1] < losses[0], losses


def test_pushed_weights_load_strictly_into_hf(engines, qwen3_checkpoint, batch_for):
    titan, _ = engines
    pushed = titan.state_dict_for_push()
    assert all(not k.startswith("layers.") for k in pushed)  # HF names, not TorchTitan's
    hf = AutoModelForCausalLM.from_pretrained(qwen3_checkpoint)
    hf.load_state_dict(pushed, strict=True)
    ids = batch_for(titan.hf_config.vocab_size).input_ids
    titan.model.eval()
    with torch.no_grad():
        assert float((hf(input_ids=ids).logits - titan._logits(ids)).abs().max()) < 1e-5
    titan.model.train()


def test_save_pretrained_writes_a_loadable_hf_checkpoint(engines, tmp_path):
    titan, _ = engines
    titan.save_pretrained(tmp_path / "hf")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").state_dict()
    assert _max_diff(loaded, titan.state_dict_for_push()) == 0.0


def test_dcp_checkpoint_resumes_weights_optimizer_and_schedule(qwen3_checkpoint, tmp_path, batch_for):
    optim = OPTIM.model_copy(update={"warmup_steps": 4})  # the LR depends on the restored step
    titan = TitanConfig(checkpoint={"folder": str(tmp_path / "ckpt"), "interval": 2})
    first = TitanTrainingEngine(qwen3_checkpoint, optim, build_loss({"name": "grpo"}), titan=titan)
    batch = batch_for(first.hf_config.vocab_size)
    for _ in range(3):  # saves step-2, then one more step
        first.train_step(batch)
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-2"]
    expected = first.state_dict_for_push()

    resumed = TitanTrainingEngine(qwen3_checkpoint, optim, build_loss({"name": "grpo"}), titan=titan)
    assert resumed.step == 2 and resumed.scheduler.get_last_lr() == [pytest.approx(optim.lr * 3 / 4)]
    resumed.train_step(batch)  # the third step again: equal only if AdamW's moments came back too
    assert _max_diff(resumed.state_dict_for_push(), expected) < 1e-6


def test_trainer_actor_trains_and_publishes_with_torchtitan(qwen3_checkpoint, tmp_path):
    import asyncio

    from actors.trainer import Trainer
    from forge_kernels.store import StoreConfig, build_store, weights_key
    from forge_kernels.types import Completion, Episode, Turn

    store = StoreConfig(namespace="titan_actor", root=str(tmp_path / "shm"))
    trainer = Trainer(Trainer.Config(model_path=qwen3_checkpoint, engine="torchtitan", store=store,
                                     optim={"lr": 1e-2}))

    async def go():
        await trainer.setup()
        await trainer.push_weights(0)
        completion = Completion(prompt_ids=[5, 6, 7], token_ids=[8, 9, 10, 11], text="", logprobs=[-2.0] * 4,
                                policy_version=0)
        episodes = [Episode(f"e{i}", "g", "t", [Turn(completion, advantage=(-1.0) ** i)]) for i in range(2)]
        metrics = await trainer.train_step(episodes)
        await trainer.push_weights(1)
        return metrics, await build_store(store).get_state_dict(weights_key(1))

    metrics, pushed = asyncio.run(go())
    assert metrics["train/version"] == 1.0 and metrics["train/logprob_diff_max"] > 0.1  # -2.0 is not the policy's
    AutoModelForCausalLM.from_pretrained(qwen3_checkpoint).load_state_dict(pushed, strict=True)
