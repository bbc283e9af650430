"""The CUDA-kernel environment: KernelBench tasks answered with CUDA C++ built by ``load_inline``.

    env:
      name: cuda
      config:
        tasks: {source: builtin, levels: [1]}
        eval: {trials: 3, compile_timeout_s: 300}

The model gets the reference module and writes a Python module whose ``ModelNew`` calls functions
of an extension built with ``torch.utils.cpp_extension.load_inline`` (KernelBench's CUDA format).
Scoring goes through the isolated evaluator (``EvalOptions.language = "cuda"``), locally or through
eval servers: compile errors come back with the trimmed nvcc / g++ diagnostics as feedback. On a
CPU machine the extension is compiled but cannot run, so the reward reflects compilation only
(and the static hack checks); on a GPU the full correctness, timing and hack checks apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, field_validator

from forge_kernels.config import StrictModel
from forge_kernels.env.base import Action, Environment, Outcome, register_environment
from forge_kernels.env.extraction import extract_code
from forge_kernels.env.feedback import format_feedback
from forge_kernels.env.prompts import ChatMessage
from forge_kernels.env.rewards import RewardConfig, compute_reward
from forge_kernels.eval.results import EvalOptions, EvalResult
from forge_kernels.tasks.loaders import BuiltinTasksConfig, KernelBenchTasksConfig, load_tasks
from forge_kernels.tasks.task import Task

__all__ = ["CUDA_SYSTEM_PROMPT", "CudaKernelEnv", "ONE_SHOT_REFERENCE", "ONE_SHOT_SOLUTION"]

CUDA_SYSTEM_PROMPT = """\
You are an expert GPU kernel engineer. You rewrite PyTorch modules as fast, correct CUDA C++ kernels.

You are given a reference module in KernelBench format: a class `Model(nn.Module)`, a function \
`get_inputs()` returning the arguments of `Model.forward`, and a function `get_init_inputs()` \
returning the arguments of `Model.__init__`. Write a new module defining `class ModelNew(nn.Module)` \
that computes the same outputs as `Model`, with the work done by your own CUDA kernels (`__global__` \
functions) compiled with `torch.utils.cpp_extension.load_inline`.

Rules:
- Put the kernels and their host-side launchers (taking and returning `torch::Tensor`) in a string \
passed as `cuda_sources`, the launchers' declarations in `cpp_sources`, and their names in \
`functions=[...]`; call `load_inline(name=..., cpp_sources=..., cuda_sources=..., functions=[...])` \
once, at module level, with string literals or module-level string constants as arguments (the \
extension is built before your module runs).
- `ModelNew` takes the same constructor arguments and the same forward arguments as `Model` and \
returns outputs of the same shapes and dtypes, equal within floating-point tolerance. Create \
parameters in the same order and the same way as `Model`, so the same seed gives the same weights.
- Do the computation in your CUDA kernels. Allocating outputs (`torch::empty_like`), views and \
`.contiguous()` are fine; PyTorch operators doing the actual work (`torch::matmul`, `x.relu()`, \
`at::softmax`, ...), in Python or in C++, are not. Launch on the current (default) stream.
- The sizes you are tested on may differ from the constants in the reference: read sizes from the \
tensors, guard every index, and handle sizes that are not multiples of your block size.
- No file, process or network access from C++; no extra include paths or linker flags beyond \
`-lcublas`-style CUDA libraries.
- Reply with the complete Python module (imports included; no `Model`, `get_inputs` or \
`get_init_inputs` needed) in a single ```python code block.
"""

ONE_SHOT_REFERENCE = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(4096, 4096), torch.randn(4096, 4096)]


def get_init_inputs():
    return []
'''

ONE_SHOT_SOLUTION = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

elementwise_add_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void elementwise_add_kernel(const float* a, const float* b, float* out, int64_t size) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = a[idx] + b[idx];
    }
}

torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b) {
    auto a_c = a.contiguous();
    auto b_c = b.contiguous();
    auto out = torch::empty_like(a_c);
    int64_t size = a_c.numel();
    const int block_size = 256;
    const int64_t num_blocks = (size + block_size - 1) / block_size;
    elementwise_add_kernel<<<num_blocks, block_size>>>(a_c.data_ptr<float>(), b_c.data_ptr<float>(),
                                                       out.data_ptr<float>(), size);
    return out;
}
"""

elementwise_add_cpp_source = "torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b);"

elementwise_add = load_inline(
    name="elementwise_add",
    cpp_sources=elementwise_add_cpp_source,
    cuda_sources=elementwise_add_source,
    functions=["elementwise_add_cuda"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.elementwise_add = elementwise_add

    def forward(self, a, b):
        return self.elementwise_add.elementwise_add_cuda(a, b)
'''


def _user_message(reference_source: str) -> str:
    return (f"Reference module:\n\n```python\n{reference_source.strip()}\n```\n\n"
            "Write `ModelNew` using CUDA kernels built with `load_inline`.")


@register_environment("cuda")
class CudaKernelEnv(Environment[Task]):
    """KernelBench tasks, answered in CUDA C++ (``load_inline``), scored by the isolated evaluator."""

    class Config(StrictModel):
        """The YAML ``env.config`` of the CUDA environment."""

        tasks: BuiltinTasksConfig | KernelBenchTasksConfig = Field(
            default_factory=lambda: BuiltinTasksConfig(levels=[1]), discriminator="source",
            description="which tasks: {source: builtin, levels: [...]} or {source: kernelbench, path: ...}")
        one_shot: bool = Field(default=True, description="show the solved elementwise-add example first")
        system_prompt: str | None = Field(default=None, description="replaces CUDA_SYSTEM_PROMPT if set")
        eval: EvalOptions = Field(default_factory=lambda: EvalOptions(language="cuda"),
                                  description="evaluation options (language must stay 'cuda')")
        eval_urls: list[str] = Field(default_factory=list,
                                     description="eval servers to score through; empty: a local evaluator")
        build_dir: str | None = Field(default=None, description="CUDA build cache (default: ~/.cache/...)")
        reward: RewardConfig = Field(default_factory=RewardConfig)
        max_feedback_chars: int = Field(default=2000, ge=200, description="feedback text is trimmed to this")

        @field_validator("eval")
        @classmethod
        def _cuda_language(cls, options: EvalOptions) -> EvalOptions:
            if "language" not in options.model_fields_set:
                return options.model_copy(update={"language": "cuda"})
            if options.language != "cuda":
                raise ValueError(f"env 'cuda' evaluates CUDA candidates: eval.language must be 'cuda', "
                                 f"got {options.language!r}")
            return options

    config: Config

    def __init__(self, config: StrictModel | None = None) -> None:
        super().__init__(config)
        self._scorer: Any = None

    async def setup(self) -> None:
        """Start the scorer: an :class:`EvalClient` for ``eval_urls``, else a local Evaluator."""
        if self._scorer is not None:
            return
        if self.config.eval_urls:
            from forge_kernels.eval.service.client import EvalClient

            self._scorer = EvalClient(self.config.eval_urls)
        else:
            from forge_kernels.eval import Evaluator

            self._scorer = Evaluator(self.config.eval, cuda_build_dir=self.config.build_dir)

    async def close(self) -> None:
        scorer, self._scorer = self._scorer, None
        if scorer is None:
            return
        if self.config.eval_urls:
            await scorer.aclose()
        else:
            scorer.close()

    def load_tasks(self) -> Sequence[Task]:
        return load_tasks(self.config.tasks)

    def initial_messages(self, task: Task) -> list[ChatMessage]:
        messages: list[ChatMessage] = [{"role": "system", "content": self.config.system_prompt or CUDA_SYSTEM_PROMPT}]
        if self.config.one_shot and task.name != "level1/add":
            messages += [{"role": "user", "content": _user_message(ONE_SHOT_REFERENCE)},
                         {"role": "assistant", "content": f"```python\n{ONE_SHOT_SOLUTION.strip()}\n```"}]
        messages.append({"role": "user", "content": _user_message(task.source)})
        return messages

    def parse_action(self, task: Task, text: str) -> Action:
        extracted = extract_code(text)
        if not extracted.ok:
            assert extracted.failure is not None
            return Action(False, message=extracted.message, failure=extracted.failure.value)
        return Action(True, content=extracted.code, message=extracted.message)

    async def evaluate(self, task: Task, code: str) -> EvalResult:
        """The evaluator's verdict on ``code`` (set up on first use)."""
        await self.setup()
        if self.config.eval_urls:
            return await self._scorer.evaluate(task, code, self.config.eval)
        return await self._scorer.aevaluate(task, code, self.config.eval)

    async def score(self, task: Task, action: Action) -> Outcome:
        result = await self.evaluate(task, str(action.content))
        info = {"parsed": True, "compiled": result.compiled, "correct": result.correct, "fault": result.fault.value,
                "speedup": result.speedup, "profiling_ratio": result.profiling_ratio,
                "hacks": [h.flag.value for h in result.hacks if h.rejected],
                "correctness_checked": result.correctness_note is None and result.fault.compiled}
        feedback = format_feedback(result, self.config.max_feedback_chars, language="CUDA")
        return Outcome(compute_reward(result, self.config.reward), result.correct, feedback, info)

    def feedback_message(self, task: Task, outcome: Outcome) -> ChatMessage:
        tail = ("Fix the problem and reply with the complete module in one ```python block." if not outcome.success
                else "Make it faster if you can; reply with the complete module in one ```python block.")
        return {"role": "user", "content": f"{outcome.feedback}\n\n{tail}"}
