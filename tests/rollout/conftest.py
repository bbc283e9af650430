"""Fixtures for the rollout tests (the tokenizer is in tests/conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest


@pytest.fixture
def run():
    """``run(coro)``: run a coroutine on a fresh loop, bounded so no test hangs."""

    def go(coro: Coroutine[Any, Any, Any], timeout: float = 30) -> Any:
        return asyncio.run(asyncio.wait_for(coro, timeout))

    return go
