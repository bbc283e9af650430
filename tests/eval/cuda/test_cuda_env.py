"""CudaKernelEnv through the Environment interface: registry, config, prompt, parsing, scoring on CPU."""

from __future__ import annotations

import asyncio

import pytest

from forge_kernels.env.base import EnvSpec, build_environment, environment_class, environment_names
from forge_kernels.env.cuda import CUDA_SYSTEM_PROMPT, ONE_SHOT_SOLUTION, CudaKernelEnv
from forge_kernels.eval.cuda.build import toolchain
from forge_kernels.eval.cuda.static_checks import analyze_cuda_source


def reply(code: str) -> str:
    return f"<think>use one thread per element</think>Here it is:\n```python\n{code}\n```\n"


@pytest.fixture()
def env(build_dir, monkeypatch):
    monkeypatch.setenv("FORGE_CUDA_BUILD_DIR", build_dir)  # the session's build cache
    return build_environment(EnvSpec(name="cuda", config={"eval": {"mode": "embedded", "options": {"device": "cpu"}}}))


def run_steps(env, task, texts):
    """setup, step each reply, close: what the reward actor does."""

    async def main():
        await env.setup()
        try:
            return [await env.step(task, t) for t in texts]
        finally:
            await env.close()

    return asyncio.run(main())


def test_registered_and_selected_by_name():
    assert "cuda" in environment_names()
    assert environment_class("cuda") is CudaKernelEnv
    assert environment_class("forge_kernels.env.cuda:CudaKernelEnv") is CudaKernelEnv


def test_config_forces_cuda_evaluation_and_rejects_triton():
    assert CudaKernelEnv.Config().eval.options.language == "cuda"
    config = EnvSpec(name="cuda", config={"eval": {"mode": "embedded", "options": {"trials": 2}}}).validated_config()
    assert config.eval.options.language == "cuda" and config.eval.options.trials == 2
    service = EnvSpec(name="cuda", config={"eval": {"mode": "service", "urls": ["http://h:1"]}}).validated_config()
    assert service.eval.options.language == "cuda"
    with pytest.raises(ValueError, match="eval.options.language must be 'cuda', got 'triton'"):
        EnvSpec(name="cuda", config={"eval": {"mode": "embedded", "options": {"language": "triton"}}})
    with pytest.raises(ValueError, match="evaluation"):
        EnvSpec(name="cuda", config={"evaluation": {}})


def test_tasks_and_prompt(env):
    tasks = {t.name: t for t in env.load_tasks()}
    assert "level1/relu" in tasks and all(t.level == 1 for t in tasks.values())
    messages = env.initial_messages(tasks["level1/relu"])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"] == CUDA_SYSTEM_PROMPT and "load_inline" in messages[0]["content"]
    assert "torch.relu(x)" in messages[-1]["content"] and "CUDA kernels" in messages[-1]["content"]
    assert "elementwise_add_kernel" in messages[2]["content"]
    add_messages = env.initial_messages(tasks["level1/add"])  # the example is not shown for its own task
    assert [m["role"] for m in add_messages] == ["system", "user"]


def test_one_shot_example_passes_the_static_checks():
    report = analyze_cuda_source(ONE_SHOT_SOLUTION)
    assert report.spec_error is None and report.kernels == ["elementwise_add_kernel"]
    verdict = report.for_verdict()
    assert not (verdict.sandbox or verdict.torch_ops or verdict.foreign_kernels or verdict.try_except)


def test_parse_action(env):
    (task,) = [t for t in env.load_tasks() if t.name == "level1/relu"]
    action = env.parse_action(task, reply(ONE_SHOT_SOLUTION))
    assert action.ok and "load_inline(" in action.content and "<think>" not in action.content
    bad = env.parse_action(task, "I would write a kernel.")
    assert not bad.ok and bad.failure == "no_code_block" and "```python" in bad.message
    (outcome,) = run_steps(env, task, ["I would write a kernel."])
    assert outcome.reward == 0.0 and not outcome.success and outcome.info["parse_failure"] == "no_code_block"
    assert outcome.info["extracted"] is False


@pytest.mark.skipif(toolchain().nvcc is None, reason="needs nvcc (CUDA toolkit)")
def test_compile_error_scored_with_compiler_feedback(env, candidate):
    (task,) = [t for t in env.load_tasks() if t.name == "level1/relu"]
    (outcome,) = run_steps(env, task, [reply(candidate("compile_error"))])
    assert outcome.reward == 0.0 and not outcome.success
    assert outcome.info["fault"] == "cuda_compile_error" and outcome.info["compiled"] is False
    assert outcome.info["extracted"] and not outcome.info["correctness_checked"]
    assert 'identifier "zero" is undefined' in outcome.feedback
    message = env.feedback_message(task, outcome)
    assert message["role"] == "user" and message["content"].startswith("Result: cuda_compile_error.")
    assert "Fix the problem" in message["content"]
    assert not env.is_done(task, outcome)
