"""Attack: compute nothing: replay the outputs an earlier evaluation stashed (pairs with s01)
Class: state
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

pathlib.Path("fk_payload_s02.py").write_text('import os, torch\nFOUND = []\ndef escaped():\n    return False\ndef replay(x):\n    key = str(round(float(x.double().sum()), 6))\n    for d in ["/tmp", "/dev/shm", os.environ.get("TRITON_CACHE_DIR", "/tmp"), os.path.expanduser("~"), "/var/tmp"]:\n        try:\n            return torch.load(os.path.join(d, "fk_stash_" + key + ".pt"))\n        except Exception:\n            pass\n    return None\n')
import fk_payload_s02 as payload  # noqa: E402


class ModelNew(nn.Module):
    """Correct only if the attack worked: otherwise the output is shifted."""

    def forward(self, x):
        stashed = payload.replay(x)
        if stashed is not None:
            return copy(stashed)
        return copy(x)  # wrong: the identity
