import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def max_dim_kernel(x_ptr, out_ptr, R, INNER, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    # The input is viewed as [outer, R, INNER]; one program reduces R for BLOCK_I inner positions.
    outer = tl.program_id(axis=0)
    offs_i = tl.program_id(axis=1) * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < INNER
    base = x_ptr + outer * R * INNER
    acc = tl.full((BLOCK_I,), float("-inf"), dtype=tl.float32)
    for r_start in range(0, R, BLOCK_R):
        offs_r = r_start + tl.arange(0, BLOCK_R)
        mask = (offs_r[:, None] < R) & mask_i[None, :]
        x = tl.load(base + offs_r[:, None] * INNER + offs_i[None, :], mask=mask, other=float("-inf"))
        acc = tl.maximum(acc, tl.max(x.to(tl.float32), axis=0))
    tl.store(out_ptr + outer * INNER + offs_i, acc, mask=mask_i)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dim = self.dim % x.ndim
        outer = 1
        for size in x.shape[:dim]:
            outer *= size
        inner = 1
        for size in x.shape[dim + 1:]:
            inner *= size
        reduce = x.shape[dim]
        out_shape = list(x.shape[:dim]) + list(x.shape[dim + 1:])
        out = torch.empty(out_shape, dtype=x.dtype, device=x.device)
        BLOCK_R = min(64, triton.next_power_of_2(reduce))
        BLOCK_I = min(128, triton.next_power_of_2(inner))
        grid = (outer, triton.cdiv(inner, BLOCK_I))
        max_dim_kernel[grid](x, out, reduce, inner, BLOCK_R=BLOCK_R, BLOCK_I=BLOCK_I)
        return out
