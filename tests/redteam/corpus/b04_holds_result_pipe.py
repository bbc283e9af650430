"""Attack: a forked child keeps every inherited fd (the result pipe) open for minutes
Class: bounds
Expect: harmless
Task: relu
Max-wall-s: 30
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

pathlib.Path("fk_payload_b04.py").write_text('import os, time\ndef attack():\n    if os.fork() == 0:\n        os.setsid()\n        time.sleep(300)\n        os._exit(0)\n')
import fk_payload_b04 as payload  # noqa: E402


class ModelNew(nn.Module):
    """A correct kernel; the attack runs beside it and must change nothing outside this evaluation."""

    def forward(self, x):
        payload.attack()
        return relu(x)
