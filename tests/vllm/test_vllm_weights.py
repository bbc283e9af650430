"""Weight pushes through the tensor store into the vLLM engine, behind the Generator's gate."""

from __future__ import annotations

import asyncio

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed here; `make test-vllm` runs these in its own venv")

from actors.common import load_model, load_tokenizer  # noqa: E402
from actors.engines.sampling import SamplingConfig  # noqa: E402
from actors.engines.vllm_engine import VLLMEngineConfig, VLLMGenerationEngine  # noqa: E402
from actors.generator import Generator  # noqa: E402
from forge_kernels.models.tiny import save_checkpoint  # noqa: E402
from forge_kernels.store import build_store, weights_key  # noqa: E402

pytestmark = pytest.mark.vllm

PROMPTS = [[5, 6, 7, 8], [40, 41]]
SAMPLED = SamplingConfig(max_tokens=16, temperature=1.0, seed=11)
GREEDY = SamplingConfig(max_tokens=16, temperature=0.0)
SMALL = VLLMEngineConfig(max_model_len=512, kv_cache_gib=0.25)


def test_a_weight_push_acts_like_a_fresh_engine_with_those_weights(checkpoint, store_cfg, run, tmp_path):
    model = load_model(checkpoint)
    pushed = perturbed_state_dict(model)

    async def through_the_generator():
        store = build_store(store_cfg)
        gen = Generator(Generator.Config(model_path=checkpoint, engine="vllm", vllm=SMALL, store=store_cfg))
        await gen.setup()  # before any version is published (a generator started later loads the newest)
        await store.put_state_dict(pushed, weights_key(1))
        await store.put_state_dict(dict(model.state_dict()), weights_key(2))  # the original weights
        try:
            before = await gen.generate(PROMPTS, 2, GREEDY)
            early = asyncio.create_task(gen.generate(PROMPTS, 2, SAMPLED))  # in flight during the update
            await asyncio.sleep(0)
            assert await gen.update_weights(1) == 1
            early_done = await early
            after_sampled = await gen.generate(PROMPTS, 2, SAMPLED)
            after_greedy = await gen.generate(PROMPTS, 2, GREEDY)
            load_s = gen.engine.last_load_s
            await gen.update_weights(2)
            restored = await gen.generate(PROMPTS, 2, GREEDY)
        finally:
            await gen.close()
            await store.close()
        return before, early_done, after_sampled, after_greedy, restored, load_s

    before, early, after_sampled, after_greedy, restored, load_s = run(through_the_generator())
    print(f"vLLM weight load from the shm store: {load_s * 1e3:.1f} ms")
    assert {c.policy_version for c in early} == {0}  # drained on the old version
    assert {c.policy_version for c in after_sampled + after_greedy} == {1}
    assert [c.token_ids for c in after_greedy] != [c.token_ids for c in before]
    assert [c.token_ids for c in restored] == [c.token_ids for c in before]  # reload restores exactly

    fresh_dir = save_checkpoint(_with_weights(model, pushed), load_tokenizer(checkpoint), tmp_path / "pushed")
    fresh = VLLMGenerationEngine(str(fresh_dir), "float32", SMALL)
    try:
        fresh_sampled = run(fresh.generate(PROMPTS, 2, SAMPLED))
        fresh_greedy = run(fresh.generate(PROMPTS, 2, GREEDY))
    finally:
        run(fresh.close())
    assert [c.token_ids for c in after_sampled] == [c.token_ids for c in fresh_sampled]
    assert [c.token_ids for c in after_greedy] == [c.token_ids for c in fresh_greedy]
    assert [c.logprobs for c in after_sampled] == [c.logprobs for c in fresh_sampled]


def perturbed_state_dict(model: torch.nn.Module, seed: int = 1, scale: float = 0.5) -> dict[str, torch.Tensor]:
    """The model's weights plus seeded noise (a stand-in for a training step that moved them)."""
    gen = torch.Generator().manual_seed(seed)
    return {k: v + scale * torch.randn(v.shape, generator=gen, dtype=v.dtype) for k, v in model.state_dict().items()}


def _with_weights(model, state_dict):
    model.load_state_dict(state_dict)
    return model

