"""The eval app on a GPU (configs/eval_gpu.yaml, a few built-in tasks): kernels compiled by Triton,
timed against the live eager and torch.compile baselines, so speedups, geomeans and fast_p are real."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from apps.eval.config import EvalAppConfig
from apps.eval.main import run
from forge_kernels.config import load_config
from apps.eval.report import MetricsSummary

GPU_CONFIG = Path(__file__).resolve().parents[3] / "configs" / "eval_gpu.yaml"

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_shipped_solutions_are_timed_on_the_gpu(tmp_path):
    names = ["level1/relu", "level1/softmax", "level2/bias_gelu"]
    cfg = load_config(EvalAppConfig, GPU_CONFIG, [f"run_dir={tmp_path}", f"env.config.tasks.names={names}",
                                                  "samples_per_task=2"])
    report = asyncio.run(run(cfg))
    final = MetricsSummary.model_validate(report["final"])
    assert report["devices"] and not any("cpu" in d for d in report["devices"])
    assert report["timing"] == "measured"
    assert (final.tasks, final.samples) == (3, 6)
    assert final.correct_rate == 1.0 and final.fault_counts == {"none": 6}
    assert (final.timed_correct, final.untimed_correct) == (6, 0)
    for baseline in ("eager", "compile"):
        assert final.geomean_speedup[baseline] is not None and final.geomean_speedup[baseline] > 0
        assert final.geomean_best_speedup[baseline] >= final.geomean_speedup[baseline] * 0.999
        curve = [final.fast_p["per_sample"][baseline][p] for p in (0.0, 1.0, 1.2, 1.5, 2.0)]
        assert all(v is not None for v in curve) and curve == sorted(curve, reverse=True)  # fast_p falls with p
    speedups = [s["speedup"] for s in report["samples"]]
    assert final.fast_p["per_sample"]["eager"][1.0] == pytest.approx(sum(s > 1.0 for s in speedups) / 6)
    assert all(row["best_speedup"] is not None and row["best_speedup_vs_compile"] is not None
               for row in report["per_task"])
    print(f"\n{report['devices']}: geomean speedup eager {final.geomean_speedup['eager']:.2f}, "
          f"vs compile {final.geomean_speedup['compile']:.2f}; per task "
          f"{[(r['task'], round(r['best_speedup'], 2)) for r in report['per_task']]}")
