"""Prompt rendering: structure, one-shot example, SFT conversations."""

from __future__ import annotations

import pytest

from forge_kernels.env.extraction import extract_code
from forge_kernels.env.prompts import SYSTEM_PROMPT, PromptConfig, render_messages, sft_messages, task_messages
from forge_kernels.tasks.kernelbook import KernelBookExample
from forge_kernels.tasks.loaders import load_builtin_tasks

(GELU_GATE,) = load_builtin_tasks(names=["level2/gelu_gate"])
(RELU,) = load_builtin_tasks(names=["level1/relu"])


def test_system_prompt_states_the_contract() -> None:
    for phrase in ("class ModelNew(nn.Module)", "get_inputs()", "get_init_inputs()", "@triton.jit",
                   "same order", "mask every load and store", "```python"):
        assert phrase in SYSTEM_PROMPT


def test_task_prompt_with_one_shot_example() -> None:
    messages = task_messages(GELU_GATE)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"] == SYSTEM_PROMPT
    assert RELU.source.strip() in messages[1]["content"]
    example = extract_code(messages[2]["content"])
    assert example.ok and example.code.strip() == RELU.solution.strip()
    assert GELU_GATE.source.strip() in messages[3]["content"]
    assert "Write `ModelNew`" in messages[3]["content"]


def test_zero_shot_and_custom_system_prompt() -> None:
    messages = task_messages(GELU_GATE, PromptConfig(one_shot=False, system_prompt="Be brief."))
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == "Be brief."


def test_the_example_is_never_the_task_itself() -> None:
    messages = task_messages(RELU)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert RELU.solution.strip() not in "".join(m["content"] for m in messages)


def test_other_one_shot_task_and_unknown_one() -> None:
    messages = task_messages(RELU, PromptConfig(one_shot_task="level2/gelu_gate"))
    assert GELU_GATE.solution.strip() in messages[2]["content"]
    with pytest.raises(ValueError, match="level9/none"):
        task_messages(RELU, PromptConfig(one_shot_task="level9/none"))


def test_prompt_config_rejects_unknown_keys() -> None:
    with pytest.raises(ValueError, match="one_shots"):
        PromptConfig.model_validate({"one_shots": True})


def test_sft_conversation_for_a_builtin_task_round_trips_through_extraction() -> None:
    messages = sft_messages(GELU_GATE, PromptConfig(one_shot=False))
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    assert extract_code(messages[-1]["content"]).code.strip() == GELU_GATE.solution.strip()


def test_sft_conversation_for_kernelbook_names_its_classes() -> None:
    example = KernelBookExample(
        name="book/0", entry_point="SumAggregator", origin="book.jsonl:row 0",
        python_code="class SumAggregator:\n    pass\ndef get_inputs():\n    return []\n"
                    "def get_init_inputs():\n    return [[], {}]\n",
        triton_code="class SumAggregatorNew:\n    pass\n",
    )
    messages = sft_messages(example, PromptConfig(one_shot=False))
    assert "reference class is `SumAggregator`" in messages[1]["content"]
    assert "name your class `SumAggregatorNew`" in messages[1]["content"]
    assert extract_code(messages[-1]["content"], new_class="SumAggregatorNew").ok


def test_sft_needs_a_solution() -> None:
    with pytest.raises(ValueError, match="no solution"):
        sft_messages(RELU.model_copy(update={"solution": None}))


def test_render_messages_for_raw_source() -> None:
    messages = render_messages(RELU.source, PromptConfig(one_shot=False))
    assert messages[-1]["role"] == "user" and "```python\nimport torch" in messages[-1]["content"]
