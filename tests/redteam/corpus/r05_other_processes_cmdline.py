"""Attack: read other processes' command lines (the server's, the zygote's)
Class: read
Expect: rejected
Task: relu
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

pathlib.Path("fk_payload_r05.py").write_text('import os\ndef escaped():\n    for pid in os.listdir("/proc"):\n        if pid.isdigit() and int(pid) > 3:\n            try:\n                if b"pytest" in open(f"/proc/{pid}/cmdline", "rb").read() or b"uvicorn" in open(f"/proc/{pid}/cmdline", "rb").read():\n                    return True\n            except OSError:\n                pass\n    return len([p for p in os.listdir("/proc") if p.isdigit()]) > 5\n')
import fk_payload_r05 as payload  # noqa: E402


class ModelNew(nn.Module):
    """Correct only if the attack worked: otherwise the output is shifted."""

    def forward(self, x):
        if payload.escaped():
            return relu(x)
        return relu(copy(x) - 1.0)
