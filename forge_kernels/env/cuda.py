"""The CUDA-kernel environment: KernelBench tasks answered with CUDA C++ built by ``load_inline``.

    env:
      name: cuda
      config:
        tasks: {source: builtin, levels: [1]}             # or {source: kernelbench, path: ...}
        prompt: {one_shot: true}
        eval: {mode: embedded, options: {trials: 3, compile_timeout_s: 300}}   # or {mode: service, ...}
        reward_fn: {name: kernelgym}

The model gets the reference module and writes a Python module whose ``ModelNew`` calls functions
of an extension built with ``torch.utils.cpp_extension.load_inline`` (KernelBench's CUDA format).
Scoring goes through the isolated evaluator with ``EvalOptions.language = "cuda"`` (embedded or
through the eval service, as for Triton): compile errors come back with the trimmed nvcc / g++
diagnostics as feedback. On a CPU machine the extension is compiled but cannot run, so the reward
reflects compilation only (and the static hack checks; ``info["correctness_checked"]`` is False);
on a GPU the full correctness, timing and hack checks apply. Built extensions are cached under
``$FORGE_CUDA_BUILD_DIR`` (default ``~/.cache/forge_kernels/cuda_builds``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from forge_kernels.config import StrictModel
from forge_kernels.env.base import Outcome, register_environment
from forge_kernels.env.kernel_eval import EmbeddedEvalConfig, EvalConfig, ServiceEvalConfig
from forge_kernels.env.prompts import ChatMessage
from forge_kernels.env.kernel import KernelEnv
from forge_kernels.eval import EvalOptions, EvalResult
from forge_kernels.tasks import Task, TaskSourceConfig
from forge_kernels.tasks.loaders import BuiltinTasksConfig

__all__ = ["CUDA_SYSTEM_PROMPT", "CudaKernelEnv", "CudaPromptConfig", "ONE_SHOT_REFERENCE", "ONE_SHOT_SOLUTION"]

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


class CudaPromptConfig(StrictModel):
    """How a task is put to the model."""

    one_shot: bool = Field(default=True, description="show the solved elementwise-add example first")
    system_prompt: str | None = Field(default=None, description="replaces CUDA_SYSTEM_PROMPT if set")


def _cuda_eval() -> EmbeddedEvalConfig:
    return EmbeddedEvalConfig(options=EvalOptions(language="cuda"))


@register_environment("cuda")
class CudaKernelEnv(KernelEnv):
    """Write ``ModelNew`` with CUDA kernels (``load_inline``) for a KernelBench-format reference module.

    Everything but the prompt, the evaluation language and the feedback wording is
    :class:`~forge_kernels.env.kernel.KernelEnv`'s: the same tasks, scorer (embedded or eval service), rewards and success rule.
    """

    kernel_language = "CUDA"

    class Config(KernelEnv.Config):
        tasks: TaskSourceConfig = BuiltinTasksConfig(levels=[1])
        prompt: CudaPromptConfig = CudaPromptConfig()  # type: ignore[assignment]
        eval: EvalConfig = Field(default_factory=_cuda_eval,
                                 description="as for Triton; options.language is 'cuda' (set when omitted)")

        @field_validator("eval")
        @classmethod
        def _cuda_language(cls, cfg: EmbeddedEvalConfig | ServiceEvalConfig) -> EmbeddedEvalConfig | ServiceEvalConfig:
            if "language" not in cfg.options.model_fields_set:
                return cfg.model_copy(update={"options": cfg.options.model_copy(update={"language": "cuda"})})
            if cfg.options.language != "cuda":
                raise ValueError(f"env 'cuda' evaluates CUDA candidates: eval.options.language must be 'cuda', "
                                 f"got {cfg.options.language!r}")
            return cfg

    config: Config

    def initial_messages(self, task: Task) -> list[ChatMessage]:
        prompt = self.config.prompt
        messages: list[ChatMessage] = [{"role": "system", "content": prompt.system_prompt or CUDA_SYSTEM_PROMPT}]
        if prompt.one_shot and task.name != "level1/add":  # the example is not shown for its own task
            messages += [{"role": "user", "content": _user_message(ONE_SHOT_REFERENCE)},
                         {"role": "assistant", "content": f"```python\n{ONE_SHOT_SOLUTION.strip()}\n```"}]
        messages.append({"role": "user", "content": _user_message(task.source)})
        return messages

    def kernel_facts(self, result: EvalResult) -> dict[str, Any]:
        # on a CPU machine a CUDA candidate compiles but cannot run: say whether correctness was judged
        return {**super().kernel_facts(result),
                "correctness_checked": result.fault.compiled and result.correctness_note is None}

    def feedback_message(self, task: Task, outcome: Outcome) -> ChatMessage:
        tail = ("Make it faster if you can; reply" if outcome.success else "Fix the problem and reply")
        return {"role": "user", "content": f"{outcome.feedback}\n\n{tail} with the complete module in one ```python "
                                           "block."}
