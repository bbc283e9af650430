import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def transpose_kernel(x_ptr, out_ptr, R, C, stride_xr, stride_xc, stride_or, stride_oc,
                     BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # Each program moves one [BLOCK_R, BLOCK_C] tile of x to out[c, r].
    offs_r = tl.program_id(axis=0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_c = tl.program_id(axis=1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (offs_r[:, None] < R) & (offs_c[None, :] < C)
    tile = tl.load(x_ptr + offs_r[:, None] * stride_xr + offs_c[None, :] * stride_xc, mask=mask, other=0.0)
    tl.store(out_ptr + offs_c[None, :] * stride_or + offs_r[:, None] * stride_oc, tile, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        R, C = x.shape
        out = torch.empty((C, R), dtype=x.dtype, device=x.device)
        BLOCK_R = min(64, triton.next_power_of_2(R))
        BLOCK_C = min(64, triton.next_power_of_2(C))
        grid = (triton.cdiv(R, BLOCK_R), triton.cdiv(C, BLOCK_C))
        transpose_kernel[grid](
            x, out, R, C, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
            BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C,
        )
        return out
