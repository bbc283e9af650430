"""The foundation's end-to-end path: config -> Triton kernel (interpreter) -> training -> metrics."""

from __future__ import annotations

import json

from apps.smoke.main import SmokeConfig, main
from forge_kernels.config import load_config


def test_smoke_app_learns_and_writes_metrics(tmp_path):
    jsonl = tmp_path / "m.jsonl"
    cfg = load_config(
        SmokeConfig, "configs/smoke.yaml",
        [f"metrics.backends=[{{type: jsonl, path: '{jsonl}'}}]", "trainer.steps=40"],
    )
    final = main(cfg)
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(rows) == 40
    assert rows[-1]["train/loss/mean"] == final
    # it really learns: 14.7 -> 0.082 measured (180x, under AVX2 and AVX512 alike); 10x is a margin no
    # CPU's rounding closes
    assert final < rows[0]["train/loss/mean"] / 10
