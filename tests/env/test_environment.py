"""The Environment interface: registry and EnvSpec errors, step() on invalid actions, and the
Triton environment's round trip through it (prompt -> parse -> evaluate -> reward -> feedback)."""

from __future__ import annotations

import asyncio

import pytest

from forge_kernels.config import ConfigError, validate
from forge_kernels.env.base import (
    Action,
    EnvSpec,
    Environment,
    Outcome,
    build_environment,
    environment_class,
    environment_names,
    register_environment,
)
from forge_kernels.env.kernel import SuccessConfig
from forge_kernels.env.triton import TritonKernelEnv
from forge_kernels.tasks.loaders import load_builtin_tasks

(RELU,) = load_builtin_tasks(names=["level1/relu"])


class KeywordEnv(Environment):
    """The smallest environment: reply 'yes' (uses the base class's defaults everywhere else)."""

    def load_tasks(self):
        return [RELU]

    def initial_messages(self, task):
        return [{"role": "user", "content": "say yes"}]

    def parse_action(self, task, text):
        return Action(bool(text.strip()), text.strip(), "empty reply", "empty")

    async def score(self, task, action):
        return Outcome(float(action.content == "yes"), action.content == "yes", f"you said {action.content}")


def test_registry_lists_triton_and_resolves_import_paths():
    assert "triton" in environment_names()
    assert environment_class("triton") is TritonKernelEnv and TritonKernelEnv.name == "triton"
    assert environment_class(f"{__name__}:KeywordEnv") is KeywordEnv
    assert isinstance(build_environment(EnvSpec(name=f"{__name__}:KeywordEnv")), KeywordEnv)


@pytest.mark.parametrize(("name", "message"), [
    ("nope", r"unknown environment 'nope'; registered: .*triton"),
    ("no_such_module:Env", r"cannot import 'Env' from module 'no_such_module'"),
    ("forge_kernels.env.base:NoSuchClass", r"cannot import 'NoSuchClass'"),
    ("forge_kernels.env.base:EnvSpec", r"needs an Environment subclass, got <class .*EnvSpec'>"),
])
def test_bad_names_fail_at_validation_naming_the_value(name, message):
    with pytest.raises(ConfigError, match=message) as err:
        validate(EnvSpec, {"name": name})
    assert "name:" in str(err.value)  # the error points at env.name


def test_bad_config_keys_fail_at_validation_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"env.config.promt: unknown key; did you mean 'prompt'\?"):
        validate(EnvSpec, {"name": "triton", "config": {"promt": {"one_shot": False}}})
    with pytest.raises(ConfigError, match=r"env.config.success.min_speedup: Input should be greater than 0"):
        validate(EnvSpec, {"name": "triton", "config": {"success": {"min_speedup": -1}}})
    with pytest.raises(ConfigError, match=r"env.config.words: unknown key.*valid keys here: none"):
        validate(EnvSpec, {"name": f"{__name__}:KeywordEnv", "config": {"words": ["a"]}})


def test_register_environment_rejects_non_environments_and_name_clashes():
    with pytest.raises(TypeError, match="needs an Environment subclass"):
        register_environment("not_an_env")(dict)
    with pytest.raises(ValueError, match="'triton' is already registered"):
        register_environment("triton")(KeywordEnv)


def test_step_on_invalid_actions_uses_invalid_action_outcome():
    env = KeywordEnv()
    empty = asyncio.run(env.step(RELU, "   "))
    assert (empty.reward, empty.success, empty.feedback) == (0.0, False, "empty reply")
    assert empty.info["parse_failure"] == "empty"
    good = asyncio.run(env.step(RELU, " yes "))
    assert good.reward == 1.0 and env.is_done(RELU, good)
    assert env.feedback_message(RELU, good) == {"role": "user", "content": "you said yes"}


def test_triton_env_invalid_actions_need_no_evaluator():
    env = build_environment(EnvSpec(name="triton", config={"no_code_reward": -0.25}))
    for text, failure in [("", "empty_response"), ("I would write a kernel.", "no_code_block"),
                          ("```python\nx = 1\n```", "no_model_new")]:
        outcome = asyncio.run(env.step(RELU, text))  # no setup(): parsing fails before scoring
        assert outcome.reward == -0.25 and not outcome.success and outcome.feedback
        assert outcome.info["parse_failure"] == failure
        assert not outcome.info["extracted"] and not outcome.info["compiled"] and outcome.info["fault"] is None
    with pytest.raises(RuntimeError, match="before setup"):
        asyncio.run(env.step(RELU, f"```python\n{RELU.solution}\n```"))


def test_triton_env_round_trip():
    env = build_environment(EnvSpec(name="triton", config={
        "tasks": {"source": "builtin", "levels": [1], "names": ["level1/relu", "level1/add"]},
        "prompt": {"one_shot": False},
        "eval": {"mode": "embedded", "options": {"trials": 1, "alt_shape_trials": 0}},
        "reward_fn": {"name": "tritonforge"}}))
    tasks = env.load_tasks()
    assert sorted(t.name for t in tasks) == ["level1/add", "level1/relu"]
    relu = next(t for t in tasks if t.name == "level1/relu")
    messages = env.initial_messages(relu)
    assert [m["role"] for m in messages] == ["system", "user"] and "class Model" in messages[-1]["content"]
    wrong = relu.solution.replace("tl.maximum(x, 0.0)", "tl.minimum(x, 0.0)")

    async def scenario():
        await env.setup()
        try:
            good = await env.step(relu, f"Here it is:\n```python\n{relu.solution}\n```")
            bad = await env.step(relu, f"```python\n{wrong}\n```")
            env.config = env.config.model_copy(update={"success": SuccessConfig(min_speedup=1.0)})
            fast_enough = await env.step(relu, f"```python\n{relu.solution}\n```")
            return good, bad, fast_enough
        finally:
            await env.close()

    good, bad, fast_enough = asyncio.run(scenario())
    assert good.reward == pytest.approx(0.3)  # tritonforge: correct, no timing on CPU -> no speedup tier
    assert good.success and env.is_done(relu, good)
    assert set(good.info) >= {"extracted", "compiled", "correct", "fault", "timing_available", "speedup", "eval_s"}
    assert good.info["correct"] and good.info["fault"] == "none" and not good.info["timing_available"]
    assert bad.reward == pytest.approx(0.1) and not bad.success and not env.is_done(relu, bad)  # compiled only
    assert bad.info["fault"] == "output_value_mismatch"
    feedback = env.feedback_message(relu, bad)
    assert feedback["role"] == "user" and "output_value_mismatch" in feedback["content"]
    assert fast_enough.info["correct"] and not fast_enough.success  # no timing on CPU: 1.0x is never shown
