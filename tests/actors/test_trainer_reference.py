"""Trainer and reference: push/version bookkeeping, logprob mismatch, reference = policy gives KL 0."""

from __future__ import annotations

import pytest

from actors.common import load_tokenizer
from actors.generator import Generator
from actors.reference import ReferenceModel
from actors.trainer import Trainer
from forge_kernels.store import build_store
from forge_kernels.types import Episode, Turn


def test_reference_equals_generator_and_trainer_publishes_versions(checkpoint, store_cfg, run):
    tok = load_tokenizer(checkpoint)
    prompt = tok.encode("class ModelNew(nn.Module):", add_special_tokens=False)

    async def scenario():
        gen = Generator(Generator.Config(model_path=checkpoint, store=store_cfg, sampling={"max_tokens": 12}))
        ref = ReferenceModel(ReferenceModel.Config(model_path=checkpoint))
        trainer = Trainer(Trainer.Config(model_path=checkpoint, store=store_cfg, keep_versions=2,
                                         optim={"lr": 1e-2}, loss={"name": "grpo", "beta": 0.1}))
        for actor in (gen, ref, trainer):
            await actor.setup()
        completions = await gen.generate([prompt, prompt[:3]], 2)
        refs = await ref.logprobs(completions)
        episodes = [Episode(f"e{i}", f"g{i // 2}", "t", [Turn(c, advantage=(-1.0) ** i)], ref_logprobs=r)
                    for i, (c, r) in enumerate(zip(completions, refs))]
        first = await trainer.train_step(episodes)
        with pytest.raises(ValueError, match="asked to push version 5"):
            await trainer.push_weights(5)
        await trainer.push_weights(1)
        await gen.update_weights(1)
        second_completions = await gen.generate([prompt], 2)
        second = await trainer.train_step([Episode("x", "g", "t", [Turn(c, advantage=1.0)],
                                                   ref_logprobs=r)
                                           for c, r in zip(second_completions, await ref.logprobs(second_completions))])
        await trainer.push_weights(2)
        keys = await build_store(store_cfg).keys("weights/")
        stale = await trainer.train_step(episodes)  # version-0 episodes at version 2
        await trainer.push_weights(3)
        keys_after = await build_store(store_cfg).keys("weights/")
        return completions, refs, first, second, stale, keys, keys_after

    completions, refs, first, second, stale, keys, keys_after = run(scenario())
    for c, r in zip(completions, refs):
        assert r == pytest.approx(c.logprobs, abs=1e-4)  # reference = policy at version 0
    assert first["loss/ref_kl"] == pytest.approx(0.0, abs=1e-6)
    assert first["train/fresh_logprob_diff_max"] < 1e-4 and first["train/staleness_max"] == 0
    assert second["train/fresh_logprob_diff_max"] < 1e-4  # fresh after the weight update too
    assert second["loss/ref_kl"] > 1e-6  # the policy has moved away from the reference
    assert stale["train/staleness_max"] == 2 and "train/fresh_logprob_diff_max" not in stale
    assert stale["train/logprob_diff_max"] > 1e-4  # two updates later the generator's logprobs are off
    assert keys == ["weights/v1", "weights/v2"] and keys_after == ["weights/v2", "weights/v3"]


def test_trainer_requires_ref_logprobs_when_beta_positive(checkpoint, store_cfg, run):
    async def scenario():
        gen = Generator(Generator.Config(model_path=checkpoint, store=store_cfg, sampling={"max_tokens": 4}))
        trainer = Trainer(Trainer.Config(model_path=checkpoint, store=store_cfg, loss={"name": "grpo", "beta": 0.1}))
        await gen.setup()
        await trainer.setup()
        (c,) = await gen.generate([[5, 6]], 1)
        await trainer.train_step([Episode("e", "g", "t", [Turn(c)])])

    with pytest.raises(ValueError, match="beta=0.1 but the episodes carry no ref_logprobs"):
        run(scenario())
