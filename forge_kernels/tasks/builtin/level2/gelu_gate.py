import torch
import torch.nn as nn


class Model(nn.Module):
    """GELU-gated product (GeGLU style): gelu(gate) * up."""

    def __init__(self):
        super().__init__()

    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(gate) * up


batch_size = 4096
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
