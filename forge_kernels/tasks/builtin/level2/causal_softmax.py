import torch
import torch.nn as nn


class Model(nn.Module):
    """Attention-score softmax: scale, mask future positions (causal), softmax over keys."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        seq_q, seq_k = scores.shape[-2], scores.shape[-1]
        future = torch.triu(torch.ones(seq_q, seq_k, dtype=torch.bool, device=scores.device), diagonal=1)
        return torch.softmax((scores * self.scale).masked_fill(future, float("-inf")), dim=-1)


batch_size = 64
seq_len = 1024
scale = 0.125


def get_inputs():
    return [torch.randn(batch_size, seq_len, seq_len)]


def get_init_inputs():
    return [scale]
