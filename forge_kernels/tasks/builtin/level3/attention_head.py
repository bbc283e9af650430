import torch
import torch.nn as nn


class Model(nn.Module):
    """One self-attention head: project to q, k, v, then softmax(q k^T / sqrt(d)) v."""

    def __init__(self, d_model: int, head_dim: int):
        super().__init__()
        self.q = nn.Linear(d_model, head_dim, bias=False)
        self.k = nn.Linear(d_model, head_dim, bias=False)
        self.v = nn.Linear(d_model, head_dim, bias=False)
        self.scale = head_dim ** -0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        weights = torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1)
        return weights @ v


batch_size = 16
seq_len = 1024
d_model = 1024
head_dim = 64


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, head_dim]
