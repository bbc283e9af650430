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


def _reorder_tolerance(depth: int, dtype=None, cancellation: float = 4.0) -> float:
    """Bound, relative to the largest magnitude involved, on how far two summation orders of the
    same math can differ (another SIMD width, thread count, micro-batching or sharding): each
    order is within gamma_D = D*u / (1 - D*u) of the exact value times the sum of the terms'
    magnitudes (Higham, *Accuracy and Stability of Numerical Algorithms*, eq. 3.5), where D is
    the total length of the chain of reductions and u the unit roundoff of ``dtype`` (default
    float32); ``cancellation`` bounds sum|terms| / max|result| (terms of opposite signs)."""
    import torch

    u = torch.finfo(dtype or torch.float32).eps / 2
    if depth * u >= 1:
        raise ValueError(f"reduction depth {depth} is too long for {dtype}: D*u = {depth * u} >= 1")
    return 2 * cancellation * depth * u / (1 - depth * u)


@pytest.fixture
def reorder_tolerance():
    """``reorder_tolerance(depth, dtype=torch.float32)``: see :func:`_reorder_tolerance`."""
    return _reorder_tolerance


# a corpus shaped like the kernel prompts, for a tokenizer trained in a second
TOKENIZER_CORPUS = ["def forward(self, x):\n    return x * 2\n", "Result: output_value_mismatch. The output values differ.",
                    "Write ModelNew using Triton kernels.", "```python\nimport torch\n```"] * 4


@pytest.fixture(scope="session")
def tokenizer():
    """A tiny model's tokenizer: byte-level BPE, ChatML template, eos ``<|im_end|>``."""
    from forge_kernels.models.tiny import train_tokenizer

    return train_tokenizer(TOKENIZER_CORPUS, vocab_size=300)
