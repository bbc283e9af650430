"""Fixtures for the multi-turn tests: the tiny model's tokenizer (ChatML template) and a scripted backend."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from forge_kernels.models.tiny import train_tokenizer

CORPUS = ["def forward(self, x):\n    return x * 2\n", "Result: output_value_mismatch. The output values differ.",
          "Write ModelNew using Triton kernels.", "```python\nimport torch\n```"] * 4


@pytest.fixture(scope="session")
def tokenizer():
    """The tiny model's tokenizer: byte-level BPE, ChatML template, eos ``<|im_end|>``."""
    return train_tokenizer(CORPUS, vocab_size=300)


@pytest.fixture
def run():
    """``run(coro)``: run a coroutine on a fresh loop, bounded so no test hangs."""

    def go(coro: Coroutine[Any, Any, Any], timeout: float = 30) -> Any:
        return asyncio.run(asyncio.wait_for(coro, timeout))

    return go
