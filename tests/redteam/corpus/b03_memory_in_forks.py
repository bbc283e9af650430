"""Attack: three forks each under the limit, together over it
Class: bounds
Expect: fault=host_oom
Task: relu
Options: {"host_memory_mb": 1500, "address_space_limit": false, "timeout_s": 40}
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def relu(x):
    out = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out


def copy(x):
    out = torch.empty_like(x)
    copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out

import pathlib

pathlib.Path("fk_payload_b03.py").write_text('import os, time, torch\ndef escaped():\n    for _ in range(3):\n        if os.fork() == 0:\n            t = torch.ones(150 << 20)  # 600 MB, touched\n            time.sleep(20)\n            os._exit(0)\n    time.sleep(20)\n    return False\n')
import fk_payload_b03 as payload  # noqa: E402


class ModelNew(nn.Module):
    """Correct only if the attack worked: otherwise the output is shifted."""

    def forward(self, x):
        if payload.escaped():
            return relu(x)
        return relu(copy(x) - 1.0)
