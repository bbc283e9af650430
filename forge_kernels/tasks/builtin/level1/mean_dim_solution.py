import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_mean_kernel(x_ptr, out_ptr, N, stride_row, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < N, other=0.0)
        acc += x.to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0) / N)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2d = x.reshape(-1, x.shape[-1]).contiguous()
        rows, n_cols = x2d.shape
        out = torch.empty(rows, dtype=x.dtype, device=x.device)
        BLOCK_N = min(4096, triton.next_power_of_2(n_cols))
        row_mean_kernel[(rows,)](x2d, out, n_cols, x2d.stride(0), BLOCK_N=BLOCK_N)
        return out.reshape(x.shape[:-1])
