import torch
import torch.nn as nn


class Model(nn.Module):
    """A transformer MLP: Linear -> GELU -> Linear, applied to every token."""

    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.fc1 = nn.Linear(hidden, intermediate)
        self.fc2 = nn.Linear(intermediate, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


batch_size = 8
seq_len = 1024
hidden = 2048
intermediate = 8192


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden, intermediate]
