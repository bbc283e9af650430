"""Profiling ratio (GPU): device time in the candidate's Triton kernels / all device time.

Dr. Kernel's PR rewards kernels that do the work themselves: a ModelNew that launches a token
Triton kernel and leaves the heavy lifting to cuBLAS gets a low ratio. Kernel names come from the
candidate's ``@triton.jit`` functions; the CUDA kernel Triton builds carries the function's name.
The profiler's kernel list doubles as a decoy check: none of the candidate's names seen means no
candidate kernel ran on the device.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

__all__ = ["profile_kernels", "is_candidate_kernel", "profiling_ratio"]


def is_candidate_kernel(device_name: str, kernel_names: list[str]) -> bool:
    """Whether a profiled device kernel is one of the candidate's kernels (exact name, or the name
    followed by a Triton specialisation suffix; CUDA names lose return type, namespaces, templates)."""
    base = device_name.split("(")[0]
    while "<" in base and re.search(r"<[^<>]*>", base):  # CUDA template arguments, innermost first
        base = re.sub(r"<[^<>]*>", "", base)
    words = base.split()  # CUDA: "void ns::relu_kernel" -> "relu_kernel"
    base = words[-1].rsplit("::", 1)[-1] if words else ""
    return any(base == k or base.startswith(k + "_") for k in kernel_names)


def profile_kernels(fn: Callable[[], Any], calls: int = 3) -> dict[str, float]:
    """Device microseconds per kernel name over ``calls`` calls of ``fn`` (after one warm-up)."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    totals: dict[str, float] = {}
    for event in prof.key_averages():
        if getattr(event, "device_type", None) != DeviceType.CUDA:
            continue  # CPU-side ops also carry their kernels' time: count kernels only
        device_us = float(getattr(event, "self_device_time_total", 0.0) or getattr(event, "self_cuda_time_total", 0.0))
        if device_us > 0:
            totals[event.key] = totals.get(event.key, 0.0) + device_us
    return totals


def profiling_ratio(kernel_times: dict[str, float], kernel_names: list[str]) -> float | None:
    """PR over a ``profile_kernels`` result; None when no device time was recorded at all."""
    total = sum(kernel_times.values())
    if total <= 0:
        return None
    mine = sum(t for name, t in kernel_times.items() if is_candidate_kernel(name, kernel_names))
    return mine / total
