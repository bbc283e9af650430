import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        workspace = torch.empty(1 << 40, device=x.device)  # 4 TiB
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, workspace, x.numel(), BLOCK=1024)
        return workspace[: x.numel()]
