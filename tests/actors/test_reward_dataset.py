"""Reward actor (Triton environment: embedded evaluation, extraction failures, config modes) and
dataset actor (tasks and prompts from the environment)."""

from __future__ import annotations

import pytest

from actors.dataset import DatasetActor
from actors.reward import RewardActor
from forge_kernels.config import ConfigError, validate
from forge_kernels.env.kernel_eval import ServiceEvalConfig
from forge_kernels.types import Completion


def completion(text: str) -> Completion:
    return Completion([1], [2], text, [-0.5], 0)


def test_reward_scores_a_correct_kernel_a_wrong_one_and_prose(tasks, run):
    relu = next(t for t in tasks if t.name == "level1/relu")
    wrong = relu.solution.replace("tl.maximum(x, 0.0)", "tl.minimum(x, 0.0)")
    assert wrong != relu.solution

    async def scenario():
        env = {"name": "triton", "config": {"eval": {"mode": "embedded", "options": {"trials": 1, "alt_shape_trials": 0}},
                                            "no_code_reward": -0.5}}
        actor = RewardActor(RewardActor.Config(env=env))
        await actor.setup()
        try:
            return await actor.score(relu, [completion(f"```python\n{relu.solution}\n```"),
                                            completion(f"```python\n{wrong}\n```"),
                                            completion("I would write a kernel.")])
        finally:
            await actor.close()

    good, bad, prose = run(scenario())
    assert good.info["correct"] and good.reward == 1.0 and good.info["fault"] == "none"  # kernelgym on CPU: C
    assert good.success  # correct is enough by default
    assert bad.info["compiled"] and not bad.info["correct"] and bad.reward == 0.0 and not bad.success
    assert bad.info["fault"] == "output_value_mismatch" and "do not match" in bad.feedback
    assert not prose.info["extracted"] and prose.reward == -0.5 and "python" in prose.feedback
    assert prose.info["parse_failure"] == "no_code_block"


def test_reward_eval_modes_validate():
    def env(config):
        return {"env": {"name": "triton", "config": config}}

    cfg = validate(RewardActor.Config, env({"eval": {"mode": "service", "urls": ["http://h:1"]}}))
    eval_cfg = cfg.env.validated_config().eval
    assert isinstance(eval_cfg, ServiceEvalConfig) and eval_cfg.urls == ["http://h:1"]
    with pytest.raises(ConfigError, match="env.config.eval"):
        validate(RewardActor.Config, env({"eval": {"mode": "remote"}}))
    with pytest.raises(ConfigError, match="unknown reward"):
        validate(RewardActor.Config, env({"reward_fn": {"name": "nope"}}))


def test_dataset_epochs_curriculum_and_prompts(checkpoint, run):
    async def scenario():
        env = {"name": "triton", "config": {
            "tasks": {"source": "builtin", "levels": [1, 2], "names": ["level1/relu", "level1/add", "level2/linear_relu"]},
            "prompt": {"one_shot": False}}}
        ds = DatasetActor(DatasetActor.Config(
            model_path=checkpoint, env=env, curriculum=[{"from_version": 0, "levels": [1]},
                                                     {"from_version": 2, "levels": [2]}]))
        await ds.setup()
        early = [await ds.sample(0) for _ in range(4)]
        late = [await ds.sample(2) for _ in range(2)]
        return ds, early, late

    ds, early, late = run(scenario())
    names = [s.task.name for s in early]
    assert sorted(names[:2]) == ["level1/add", "level1/relu"] and sorted(names[2:]) == sorted(names[:2])
    assert [s.epoch for s in early] == [1, 1, 2, 2]
    assert {s.task.name for s in late} == {"level2/linear_relu"}
    assert len({s.group_id for s in early + late}) == 6
    text = ds.tokenizer.decode(early[0].prompt_ids)
    assert "ModelNew" in text and text.rstrip().endswith("assistant")
    assert [m["role"] for m in early[0].messages] == ["system", "user"]  # one_shot off
    assert early[0].messages[-1]["content"] in text
    with pytest.raises(ConfigError, match="sorted by from_version and start at 0"):
        validate(DatasetActor.Config, {"curriculum": [{"from_version": 3, "levels": [1]}]})
