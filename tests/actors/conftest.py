"""Fixtures for the actor tests: a tiny checkpoint on disk and a private tensor-store namespace."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine
from typing import Any

import pytest

from forge_kernels.env.prompts import SYSTEM_PROMPT
from forge_kernels.models.tiny import TinyModelConfig, build_tiny_model, save_checkpoint, train_tokenizer
from forge_kernels.store import StoreConfig
from forge_kernels.tasks import load_tasks

TASKS = ["level1/relu", "level1/add", "level2/linear_relu"]


@pytest.fixture(scope="session")
def tasks():
    return load_tasks({"source": "builtin", "levels": [1, 2], "names": TASKS})


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory, tasks) -> str:
    corpus = [SYSTEM_PROMPT] + [t.source for t in tasks] + [t.solution for t in tasks]
    tokenizer = train_tokenizer(corpus, vocab_size=400)
    model = build_tiny_model(TinyModelConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                             num_attention_heads=1), tokenizer)
    return str(save_checkpoint(model, tokenizer, tmp_path_factory.mktemp("ckpt")))


@pytest.fixture
def store_cfg(tmp_path) -> StoreConfig:
    return StoreConfig(namespace=f"t{uuid.uuid4().hex[:8]}", root=str(tmp_path / "shm"))


@pytest.fixture
def run():
    """``run(coro)``: run a coroutine on a fresh loop, bounded so no test hangs."""

    def go(coro: Coroutine[Any, Any, Any], timeout: float = 120) -> Any:
        return asyncio.run(asyncio.wait_for(coro, timeout))

    return go
