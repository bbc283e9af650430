"""Every YAML under configs/ loads with its app's schema, so a typo in a shipped config (or a schema
change that orphans one of its keys) fails here rather than when a user first runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.eval.config import EvalAppConfig
from apps.grpo.config import GRPOConfig
from apps.sft.main import SFTConfig
from apps.smoke.main import SmokeConfig
from forge_kernels.config import load_config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
SCHEMA_BY_PREFIX = {"eval_": EvalAppConfig, "grpo_": GRPOConfig, "sft": SFTConfig, "smoke": SmokeConfig,
                    "tutorial_env": GRPOConfig}


def _schema(path: Path) -> type:
    for prefix, schema in SCHEMA_BY_PREFIX.items():
        if path.stem.startswith(prefix):
            return schema
    raise AssertionError(f"{path.name}: no app schema for this config; add its prefix to SCHEMA_BY_PREFIX")


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_shipped_config_validates(path):
    load_config(_schema(path), path)


def test_every_app_has_a_shipped_config():
    assert {_schema(p) for p in CONFIGS} == set(SCHEMA_BY_PREFIX.values())
