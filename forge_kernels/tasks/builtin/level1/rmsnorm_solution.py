import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, N, stride_row, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(axis=0)
    x_row = x_ptr + row * stride_row
    out_row = out_ptr + row * stride_row
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        tl.store(out_row + cols, x * rstd * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2d = x.reshape(-1, x.shape[-1]).contiguous()
        rows, n_cols = x2d.shape
        out = torch.empty_like(x2d)
        BLOCK_N = min(4096, triton.next_power_of_2(n_cols))
        rmsnorm_kernel[(rows,)](x2d, self.weight, out, n_cols, x2d.stride(0), self.eps, BLOCK_N=BLOCK_N)
        return out.reshape(x.shape)
