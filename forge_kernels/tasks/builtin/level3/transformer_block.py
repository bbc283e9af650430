import torch
import torch.nn as nn


class Model(nn.Module):
    """A pre-norm decoder block: x + attn(rmsnorm(x)), then h + swiglu_mlp(rmsnorm(h)).

    Attention is multi-head and causal; no linear layer has a bias (LLaMA style).
    """

    def __init__(self, d_model: int, n_heads: int, ffn_hidden: int, eps: float = 1e-6):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.eps = eps
        self.attn_norm = nn.Parameter(torch.ones(d_model))
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(d_model))
        self.w1 = nn.Linear(d_model, ffn_hidden, bias=False)
        self.w3 = nn.Linear(d_model, ffn_hidden, bias=False)
        self.w2 = nn.Linear(ffn_hidden, d_model, bias=False)

    def rmsnorm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, D = x.shape
        qkv = self.qkv(self.rmsnorm(x, self.attn_norm))
        q, k, v = qkv.view(B, S, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * self.head_dim ** -0.5
        future = torch.triu(torch.ones(S, S, dtype=torch.bool, device=x.device), diagonal=1)
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        h = x + self.proj((weights @ v).transpose(1, 2).reshape(B, S, D))
        m = self.rmsnorm(h, self.mlp_norm)
        return h + self.w2(torch.nn.functional.silu(self.w1(m)) * self.w3(m))


batch_size = 8
seq_len = 1024
d_model = 1024
n_heads = 16
ffn_hidden = 2816


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, n_heads, ffn_hidden]
