import torch
import torch.nn as nn


class Model(nn.Module):
    """Multiplies an [M, K] matrix by a [K, N] matrix."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


M = 4096
K = 4096
N = 4096


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
