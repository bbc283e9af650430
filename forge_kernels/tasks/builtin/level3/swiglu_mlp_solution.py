import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def swiglu_up_kernel(
    x_ptr, w1_ptr, w3_ptr, out_ptr, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # Both up-projections share each x tile; the gate is applied before anything is stored.
    offs_m = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        ks = k_start + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + ks[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0)
        w_offsets = ks[:, None] * stride_wk + offs_n[None, :] * stride_wn
        w_mask = (ks[:, None] < K) & (offs_n[None, :] < N)
        w1 = tl.load(w1_ptr + w_offsets, mask=w_mask, other=0.0)
        w3 = tl.load(w3_ptr + w_offsets, mask=w_mask, other=0.0)
        gate += tl.dot(x, w1, input_precision="tf32x3")
        up += tl.dot(x, w3, input_precision="tf32x3")
    h = gate * tl.sigmoid(gate) * up
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on, h, mask=mask)


@triton.jit
def matmul_wt_kernel(
    x_ptr, w_ptr, out_ptr, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # out = x @ w.T with w in nn.Linear's [out, in] layout.
    offs_m = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        ks = k_start + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + ks[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0)
        w = tl.load(w_ptr + ks[:, None] * stride_wk + offs_n[None, :] * stride_wn,
                    mask=(ks[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(x, w, input_precision="tf32x3")
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on, acc, mask=mask)


def _blocks(M: int, N: int, K: int) -> tuple[int, int, int]:
    return (min(64, max(16, triton.next_power_of_2(M))), min(64, max(16, triton.next_power_of_2(N))),
            min(32, max(16, triton.next_power_of_2(K))))


class ModelNew(nn.Module):
    def __init__(self, hidden: int, ffn_hidden: int):
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn_hidden, bias=False)
        self.w3 = nn.Linear(hidden, ffn_hidden, bias=False)
        self.w2 = nn.Linear(ffn_hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1]).contiguous()
        M, K = tokens.shape
        F = self.w1.weight.shape[0]
        h = torch.empty((M, F), dtype=x.dtype, device=x.device)
        BM, BN, BK = _blocks(M, F, K)
        w1, w3 = self.w1.weight, self.w3.weight
        swiglu_up_kernel[(triton.cdiv(M, BM), triton.cdiv(F, BN))](
            tokens, w1, w3, h, M, F, K,
            tokens.stride(0), tokens.stride(1), w1.stride(0), w1.stride(1), h.stride(0), h.stride(1),
            BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
        )
        w2 = self.w2.weight
        D = w2.shape[0]
        out = torch.empty((M, D), dtype=x.dtype, device=x.device)
        BM, BN, BK = _blocks(M, D, F)
        matmul_wt_kernel[(triton.cdiv(M, BM), triton.cdiv(D, BN))](
            h, w2, out, M, D, F,
            h.stride(0), h.stride(1), w2.stride(0), w2.stride(1), out.stride(0), out.stride(1),
            BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
        )
        return out.reshape(x.shape)
