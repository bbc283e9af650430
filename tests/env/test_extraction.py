"""extract_code: think stripping, block choice, fallbacks and failure reasons."""

from __future__ import annotations

import pytest

from forge_kernels.env.extraction import ExtractionFailure, extract_code, strip_thinking

CODE = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


def fenced(code: str = CODE, lang: str = "python") -> str:
    return f"```{lang}\n{code}```"


@pytest.mark.parametrize("lang", ["python", "py", "Python", "python3", ""])
def test_fenced_block_with_any_python_tag(lang: str) -> None:
    result = extract_code(f"Here you go:\n\n{fenced(lang=lang)}\n\nThis is fast.")
    assert result.ok and result.code == CODE and result.method == "fenced_block"


def test_takes_the_last_block_defining_model_new() -> None:
    first = CODE.replace("pass", "x = 1")
    usage = "model = ModelNew()\nprint(model)\n"
    text = f"Draft:\n{fenced(first)}\nFinal:\n{fenced(CODE)}\nUsage:\n{fenced(usage)}"
    result = extract_code(text)
    assert result.code == CODE


def test_think_blocks_are_removed_even_when_they_hold_code() -> None:
    thinking = f"<think>maybe this:\n{fenced(CODE.replace('pass', 'bad = 1'))}\n</think>"
    result = extract_code(f"{thinking}\nAnswer:\n{fenced()}")
    assert result.ok and "bad" not in result.code


def test_orphan_closing_think_drops_everything_before_it() -> None:
    # Chat templates such as Qwen3's open <think> in the prompt; the reply only closes it.
    text = f"reasoning... {fenced(CODE.replace('pass', 'bad = 1'))} </think>\n{fenced()}"
    assert extract_code(text).code == CODE


def test_unterminated_think_is_dropped_and_reported() -> None:
    result = extract_code(f"<think>I will write\n{fenced()}\nand then")
    assert result.failure is ExtractionFailure.ONLY_THINKING
    assert "ended inside <think>" in result.message


def test_answer_before_an_unterminated_think_survives() -> None:
    assert extract_code(f"{fenced()}\n<think>second thoughts").code == CODE


def test_only_closed_thinking_is_reported() -> None:
    result = extract_code("<think>hmm</think>\n  \n")
    assert result.failure is ExtractionFailure.ONLY_THINKING
    assert "only <think> reasoning" in result.message


def test_strip_thinking_is_case_insensitive_and_handles_many_blocks() -> None:
    assert strip_thinking("a<THINK>x</Think>b<think>y</think>c") == "abc"


@pytest.mark.parametrize("text", ["", "   \n", None])
def test_empty_reply(text: str | None) -> None:
    assert extract_code(text).failure is ExtractionFailure.EMPTY_RESPONSE


def test_no_code_at_all() -> None:
    result = extract_code("I cannot do that.")
    assert result.failure is ExtractionFailure.NO_CODE_BLOCK and result.code is None
    assert "```python" in result.message


def test_only_non_python_blocks_are_named() -> None:
    result = extract_code(f"{fenced(lang='cuda')}\n{fenced('ls', lang='bash')}")
    assert result.failure is ExtractionFailure.NO_CODE_BLOCK
    assert "bash, cuda" in result.message


def test_empty_block() -> None:
    assert extract_code("```python\n\n```").failure is ExtractionFailure.EMPTY_CODE_BLOCK


def test_block_without_model_new() -> None:
    result = extract_code(fenced("class Model(torch.nn.Module):\n    pass\n"))
    assert result.failure is ExtractionFailure.NO_MODEL_NEW
    assert "class ModelNew" in result.message


def test_model_new_mentioned_but_not_defined_is_not_enough() -> None:
    assert extract_code(fenced("# TODO: class ModelNew\nx = ModelNew\n")).failure is ExtractionFailure.NO_MODEL_NEW


def test_unfenced_reply_starts_at_the_first_code_line() -> None:
    result = extract_code(f"Sure! Here is the module.\n{CODE}")
    assert result.ok and result.method == "unfenced" and result.code == CODE


def test_open_fence_at_end_still_yields_its_code() -> None:
    result = extract_code(f"```python\n{CODE}")
    assert result.ok and result.method == "open_fence" and result.code == CODE


def test_longer_fences_and_tildes() -> None:
    inner = CODE + 'DOC = """\n```\nnot a fence end\n```\n"""\n'
    assert extract_code(f"````python\n{inner}````").code == inner
    assert extract_code(f"~~~python\n{CODE}~~~").code == CODE


def test_custom_class_name_for_kernelbook_style_tasks() -> None:
    code = CODE.replace("ModelNew", "SumAggregatorNew")
    assert extract_code(fenced(code), new_class="SumAggregatorNew").code == code
    assert extract_code(fenced(code)).failure is ExtractionFailure.NO_MODEL_NEW
