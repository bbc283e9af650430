"""vLLM engine: n samples with logprobs, seeds, stop handling, and agreement with the HF trainer."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed here; `make test-vllm` runs these in its own venv")

from actors.common import load_model  # noqa: E402
from actors.engines.sampling import SamplingConfig  # noqa: E402
from actors.reference import sequence_logprobs  # noqa: E402

pytestmark = pytest.mark.vllm

PROMPTS = [[5, 6, 7, 8], [40, 41], [100, 7, 9, 3, 12]]
# float32 on both sides (measured here: max 1e-6); kernels differ, so not bit-exact
LOGPROB_TOLERANCE = 1e-4


def test_n_samples_per_prompt_with_logprobs_and_finish_reasons(engine, run):
    out = run(engine.generate(PROMPTS, 3, SamplingConfig(max_tokens=12, seed=1)))
    assert len(out) == 9
    assert [c.prompt_ids for c in out] == [p for p in PROMPTS for _ in range(3)]  # prompt-major
    eos = 2  # <|im_end|> in the tiny tokenizer
    for c in out:
        assert 1 <= len(c.token_ids) <= 12 and len(c.logprobs) == len(c.token_ids)
        assert all(lp <= 0 for lp in c.logprobs) and c.policy_version == 0
        if c.finish_reason == "stop":
            assert c.token_ids[-1] == eos  # the stop token is kept, as the trainer must score it
        else:
            assert c.finish_reason == "length" and len(c.token_ids) == 12 and eos not in c.token_ids
    assert len({tuple(c.token_ids) for c in out[:3]}) > 1  # the n samples of a prompt differ


def test_seeds_reproduce_and_distinct_seeds_differ(engine, run):
    sampling = SamplingConfig(max_tokens=10, seed=7)
    a = run(engine.generate(PROMPTS, 2, sampling))
    b = run(engine.generate(PROMPTS, 2, sampling))
    c = run(engine.generate(PROMPTS, 2, sampling.model_copy(update={"seed": 8})))
    assert [x.token_ids for x in a] == [x.token_ids for x in b]
    assert [x.logprobs for x in a] == [x.logprobs for x in b]
    assert [x.token_ids for x in a] != [x.token_ids for x in c]
    # same prompt twice in one call: different base seeds, so different samples
    twice = run(engine.generate([PROMPTS[0], PROMPTS[0]], 1, sampling))
    assert twice[0].token_ids != twice[1].token_ids


def test_greedy_n_gives_identical_samples_and_truncation_is_refused(engine, run):
    greedy = run(engine.generate(PROMPTS[:1], 3, SamplingConfig(max_tokens=6, temperature=0)))
    assert len(greedy) == 3 and greedy[0].token_ids == greedy[1].token_ids == greedy[2].token_ids
    assert greedy[0] is not greedy[1]
    with pytest.raises(ValueError, match="top_p=0.9"):
        run(engine.generate(PROMPTS, 1, SamplingConfig(top_p=0.9)))
    with pytest.raises(ValueError, match="n must be >= 1"):
        run(engine.generate(PROMPTS, 0, SamplingConfig()))
    with pytest.raises(RuntimeError, match="without a tensor store"):
        run(engine.update_weights(1))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_agree_with_the_hf_trainer(engine, checkpoint, run, temperature):
    """For the same weights and tokens, generator and trainer logprobs agree (the RL invariant)."""
    out = run(engine.generate(PROMPTS, 4, SamplingConfig(max_tokens=24, temperature=temperature, seed=3)))
    model = load_model(checkpoint).eval()
    with torch.no_grad():
        trainer = sequence_logprobs(model, out, temperature, 4096, torch.device("cpu"))
    diffs = torch.cat([torch.tensor(t) - torch.tensor(c.logprobs) for t, c in zip(trainer, out, strict=True)]).abs()
    print(f"vLLM vs HF trainer logprobs at T={temperature}: max |diff| {diffs.max():.2e}, "
          f"mean {diffs.mean():.2e} over {diffs.numel()} tokens")
    assert diffs.numel() >= 12 * 4
    assert diffs.max() < LOGPROB_TOLERANCE
