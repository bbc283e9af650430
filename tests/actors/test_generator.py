"""Generator: weight updates pause new requests and drain in-flight ones; no sequence mixes versions."""

from __future__ import annotations

import asyncio

import pytest
import torch

from actors.common import load_model, load_tokenizer
from actors.engines.sampling import SamplingConfig
from actors.generator import Generator, VersionGate
from actors.reference import sequence_logprobs
from forge_kernels.runtime import shutdown, spawn
from forge_kernels.store import build_store, weights_key


def test_gate_writer_waits_for_readers_and_blocks_new_ones(run):
    async def scenario():
        gate, events = VersionGate(), []

        async def reader(name, hold):
            async with gate.request():
                events.append(f"{name}+")
                await asyncio.sleep(hold)
                events.append(f"{name}-")

        async def writer():
            async with gate.update():
                events.append("W")
                await asyncio.sleep(0.02)
                events.append("W-")

        first = [asyncio.create_task(reader(f"r{i}", 0.05)) for i in range(2)]
        await asyncio.sleep(0.01)  # both readers are inside
        w = asyncio.create_task(writer())
        await asyncio.sleep(0.01)
        late = asyncio.create_task(reader("late", 0.0))  # arrives while the writer waits
        await asyncio.gather(*first, w, late)
        return events

    events = run(scenario())
    assert events.index("W") > max(events.index("r0-"), events.index("r1-"))  # drained first
    assert events.index("late+") > events.index("W-")  # paused until the update finished


def _perturbed_state_dict(checkpoint: str) -> dict[str, torch.Tensor]:
    model = load_model(checkpoint)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_concurrent_requests_never_mix_versions(checkpoint, store_cfg, run):
    """Requests in flight when update_weights(1) arrives finish on v0; later ones run on v1;
    every completion's logprobs equal a recomputation under the weights of its stamped version."""
    new_weights = _perturbed_state_dict(checkpoint)
    tok = load_tokenizer(checkpoint)
    prompts = [tok.encode(t, add_special_tokens=False) for t in ("import triton", "def forward(self, x):")]

    async def scenario():
        store = build_store(store_cfg)
        gen = Generator(Generator.Config(model_path=checkpoint, store=store_cfg,
                                         sampling=SamplingConfig(max_tokens=24, temperature=1.0)))
        await gen.setup()
        await store.put_state_dict(new_weights, weights_key(1))  # published after the generator started
        peak = 0

        async def request(i):
            nonlocal peak
            task = asyncio.create_task(gen.generate([prompts[i % 2]], 2))
            await asyncio.sleep(0)
            peak = max(peak, gen.gate.in_flight)
            return await task

        early = [asyncio.create_task(request(i)) for i in range(4)]
        await asyncio.sleep(0.01)
        in_flight_at_update = gen.gate.in_flight
        update = asyncio.create_task(gen.update_weights(1))
        await asyncio.sleep(0)
        late = [asyncio.create_task(request(i)) for i in range(4)]
        results = await asyncio.gather(*early, update, *late)
        await store.close()
        return results[:4], results[5:], in_flight_at_update, peak, await gen.policy_version()

    early, late, in_flight_at_update, peak, version = run(scenario())
    assert in_flight_at_update >= 2 and peak >= 2  # requests really overlapped the update
    assert version == 1
    assert {c.policy_version for batch in early for c in batch} == {0}
    assert {c.policy_version for batch in late for c in batch} == {1}

    models = {0: load_model(checkpoint).eval(), 1: load_model(checkpoint).eval()}
    models[1].load_state_dict(new_weights)
    for batch in early + late:
        for c in batch:
            for v, model in models.items():
                recomputed = sequence_logprobs(model, [c], 1.0, 4096, torch.device("cpu"))[0]
                close = torch.allclose(torch.tensor(recomputed), torch.tensor(c.logprobs), atol=1e-4)
                assert close == (v == c.policy_version), (v, c.policy_version)


def test_spawned_generator_loads_versions_from_the_store(checkpoint, store_cfg, run):
    async def scenario():
        store = build_store(store_cfg)
        gen = await spawn(Generator, {"model_path": checkpoint, "store": store_cfg.model_dump(),
                                      "sampling": {"max_tokens": 4, "seed": 7}})
        await store.put_state_dict(_perturbed_state_dict(checkpoint), weights_key(3))
        try:
            before = await gen.generate.call_one([[5, 6, 7]], 3)
            assert await gen.update_weights.call_one(3) == 3
            after = await gen.generate.call_one([[5, 6, 7]], 3)
            with pytest.raises(Exception, match="no key 'weights/v9'"):
                await gen.update_weights.call_one(9)
            return before, after
        finally:
            await shutdown()
            await store.close()

    before, after = run(scenario())
    assert [c.policy_version for c in before] == [0, 0, 0] and [c.policy_version for c in after] == [3, 3, 3]
    assert all(len(c.token_ids) == len(c.logprobs) <= 4 for c in before + after)
    assert len({tuple(c.token_ids) for c in before}) > 1  # per-call seeds still differ per sample


def test_a_generator_started_mid_run_loads_the_newest_version(checkpoint, store_cfg, run):
    """A replica restarted after its process died comes back at the policy's current version, not
    at the starting checkpoint."""
    async def scenario():
        store = build_store(store_cfg)
        for v in (2, 3):
            await store.put_state_dict(_perturbed_state_dict(checkpoint), weights_key(v))
        gen = Generator(Generator.Config(model_path=checkpoint, store=store_cfg))
        await gen.setup()
        await store.close()
        return await gen.policy_version()

    assert run(scenario()) == 3
