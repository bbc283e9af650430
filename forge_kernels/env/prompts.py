"""Chat prompts for kernel tasks: system prompt, optional one-shot example, the reference source.

``task_messages(task, PromptConfig())`` gives the messages a generator is asked with;
``sft_messages`` appends the solution as the assistant turn (built-in tasks and KernelBook rows
become SFT conversations the same way).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal, TypedDict

from pydantic import Field

from forge_kernels.config import StrictModel
from forge_kernels.tasks.kernelbook import KernelBookExample
from forge_kernels.tasks.loaders import load_builtin_tasks
from forge_kernels.tasks.task import Task

__all__ = [
    "ChatMessage",
    "PromptConfig",
    "SYSTEM_PROMPT",
    "render_messages",
    "sft_messages",
    "task_messages",
]

SYSTEM_PROMPT = """\
You are an expert GPU kernel engineer. You rewrite PyTorch modules as fast, correct Triton kernels.

You are given a reference module in KernelBench format: a class `Model(nn.Module)`, a function \
`get_inputs()` returning the arguments of `Model.forward`, and a function `get_init_inputs()` \
returning the arguments of `Model.__init__`. Write a new module defining `class ModelNew(nn.Module)` \
that computes the same outputs as `Model`, with the work done by your own `@triton.jit` kernels \
launched from `forward`.

Rules:
- `ModelNew` takes the same constructor arguments and the same forward arguments as `Model` (the \
tensors `get_inputs()` returns) and returns outputs of the same shapes and dtypes, equal within \
floating-point tolerance.
- Create parameters and submodules in the same order and the same way as `Model` (for example the \
same `nn.Linear` layers), so that the same random seed gives both models the same weights.
- Do the computation in Triton kernels. Allocating outputs (`torch.empty`), views, reshapes and \
`.contiguous()` are fine; PyTorch operators doing the actual work (`torch.matmul`, `F.softmax`, \
...) are not.
- The sizes you are tested on may differ from the constants in the reference: read sizes from the \
input tensors, mask every load and store, and handle sizes that are not multiples of your block size.
- Reply with the complete Python module (imports included; no `Model`, `get_inputs` or \
`get_init_inputs` needed) in a single ```python code block.
"""


class ChatMessage(TypedDict):
    """One chat turn, as chat templates and OpenAI-style APIs take it."""

    role: Literal["system", "user", "assistant"]
    content: str


class PromptConfig(StrictModel):
    """How a task is rendered into chat messages."""

    one_shot: bool = Field(default=True, description="show a solved built-in task first")
    one_shot_task: str = Field(default="level1/relu", description="built-in task used as the example")
    system_prompt: str | None = Field(default=None, description="replaces SYSTEM_PROMPT if set")


def _user_message(reference_source: str, model_class: str, new_class: str) -> str:
    naming = ""
    if (model_class, new_class) != ("Model", "ModelNew"):
        naming = (f"\nHere the reference class is `{model_class}` (in place of `Model`); name your "
                  f"class `{new_class}` (in place of `ModelNew`).\n")
    return (f"Reference module:\n\n```python\n{reference_source.strip()}\n```\n{naming}\n"
            f"Write `{new_class}` using Triton kernels.")


def _assistant_message(solution: str) -> str:
    return f"```python\n{solution.strip()}\n```"


@lru_cache(maxsize=8)
def _one_shot_pair(task_name: str) -> tuple[str, str]:
    (example,) = load_builtin_tasks(levels=(1, 2, 3), names=[task_name])
    if example.solution is None:
        raise ValueError(f"one-shot task {task_name!r} has no solution")
    return _user_message(example.source, "Model", "ModelNew"), _assistant_message(example.solution)


def _one_shot_messages(task_name: str) -> list[ChatMessage]:
    user, assistant = _one_shot_pair(task_name)
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def render_messages(reference_source: str, config: PromptConfig | None = None, *,
                    model_class: str = "Model", new_class: str = "ModelNew") -> list[ChatMessage]:
    """System prompt, the optional one-shot pair, then the request for ``reference_source``."""
    config = config or PromptConfig()
    messages: list[ChatMessage] = [{"role": "system", "content": config.system_prompt or SYSTEM_PROMPT}]
    if config.one_shot:
        messages += _one_shot_messages(config.one_shot_task)
    messages.append({"role": "user", "content": _user_message(reference_source, model_class, new_class)})
    return messages


def task_messages(task: Task, config: PromptConfig | None = None) -> list[ChatMessage]:
    """The prompt for ``task``. The example is skipped when it is the task itself."""
    config = config or PromptConfig()
    if config.one_shot and config.one_shot_task == task.name:
        config = config.model_copy(update={"one_shot": False})
    return render_messages(task.source, config)


def sft_messages(item: Task | KernelBookExample, config: PromptConfig | None = None) -> list[ChatMessage]:
    """A full SFT conversation: the prompt for ``item`` and its solution as the assistant turn."""
    if isinstance(item, KernelBookExample):
        messages = render_messages(item.python_code, config, model_class=item.entry_point,
                                   new_class=item.new_class)
        solution = item.triton_code
    else:
        if item.solution is None:
            raise ValueError(f"task {item.name!r} has no solution to train on")
        messages = task_messages(item, config)
        solution = item.solution
    return [*messages, {"role": "assistant", "content": _assistant_message(solution)}]
