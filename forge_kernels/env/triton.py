"""The Triton kernel environment (``env.name: triton``): KernelBench tasks rewritten as Triton kernels.

    env:
      name: triton
      config:
        tasks: {source: builtin, levels: [1]}      # or {source: kernelbench, path: ...}
        prompt: {one_shot: false}
        eval: {mode: embedded, options: {trials: 1}} # or {mode: service, urls: [...]}
        reward_fn: {name: kernelgym}
        success: {min_speedup: 1.0}                  # early stop: correct and >= 1.0x

Everything but the language is :class:`~forge_kernels.env.kernel.KernelEnv`'s.
"""

from __future__ import annotations

from forge_kernels.env.base import register_environment
from forge_kernels.env.kernel import KernelEnv

__all__ = ["TritonKernelEnv"]


@register_environment("triton")
class TritonKernelEnv(KernelEnv):
    """Write ``ModelNew`` with Triton kernels for a KernelBench-format reference module."""

    kernel_language = "Triton"
