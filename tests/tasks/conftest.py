"""Fixtures for task tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run Triton kernels on the CPU interpreter; ``@triton.jit`` reads this at decoration time."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
