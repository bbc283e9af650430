"""Session-wide test setup.

Triton decides at *import* time whether its standard-library ``@jit`` helpers (``tl.sum``,
``tl.sigmoid``, ...) are interpreted, and importing torch already imports triton. So on a
machine without an NVIDIA GPU the interpreter must be switched on before anything imports torch:
here, before pytest collects any test module.

Also the fixtures several test folders share (``tests/`` is not a package, so they live here).
"""

import os
import uuid
from pathlib import Path

import pytest

if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

TINY_GRPO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "grpo_tiny.yaml"


@pytest.fixture
def tiny_config(tmp_path):
    """``tiny_config(*overrides)`` -> GRPOConfig from configs/grpo_tiny.yaml, isolated in tmp_path."""
    from apps.grpo.config import GRPOConfig  # imported late: torch must not load before TRITON_INTERPRET
    from forge_kernels.config import load_config

    def make(*overrides: str) -> GRPOConfig:
        base = [f"run_dir={tmp_path}/run", f"store.namespace=t{uuid.uuid4().hex[:8]}",
                f"store.root={tmp_path}/shm", f"metrics.backends.1.path={tmp_path}/metrics.jsonl"]
        return load_config(GRPOConfig, TINY_GRPO_CONFIG, [*base, *overrides])

    return make
