import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, M, N, stride_row,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # 2-D tiles so the bias vector is loaded once per tile and broadcast over rows.
    rows = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    offsets = rows[:, None] * stride_row + cols[None, :]
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    h = x + bias[None, :]
    tl.store(out_ptr + offsets, 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2d = x.reshape(-1, x.shape[-1]).contiguous()
        M, N = x2d.shape
        out = torch.empty_like(x2d)
        BLOCK_N = min(1024, triton.next_power_of_2(N))
        BLOCK_M = max(1, 4096 // BLOCK_N)
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        bias_gelu_kernel[grid](x2d, self.bias, out, M, N, x2d.stride(0), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
        return out.reshape(x.shape)
