"""The eval app's CI config (configs/eval_tiny.yaml) isolated in a test's tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.eval.config import EvalAppConfig
from forge_kernels.config import load_config

TINY = Path(__file__).resolve().parents[3] / "configs" / "eval_tiny.yaml"


@pytest.fixture
def eval_config(tmp_path):
    """``eval_config(*overrides)`` -> EvalAppConfig from configs/eval_tiny.yaml writing into tmp_path."""

    def make(*overrides: str) -> EvalAppConfig:
        return load_config(EvalAppConfig, TINY, [f"run_dir={tmp_path}/run", *overrides])

    return make
