import torch
import torch.nn as nn


class Model(nn.Module):
    """A LLaMA-style SwiGLU MLP: w2(silu(w1(x)) * w3(x)), no biases."""

    def __init__(self, hidden: int, ffn_hidden: int):
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn_hidden, bias=False)
        self.w3 = nn.Linear(hidden, ffn_hidden, bias=False)
        self.w2 = nn.Linear(ffn_hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


batch_size = 8
seq_len = 1024
hidden = 2048
ffn_hidden = 5632


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden, ffn_hidden]
