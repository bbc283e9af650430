"""The eval app end to end on CPU: a tiny model and the shipped solutions on built-in tasks, the
report's internal consistency, the table and plot, and config errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from apps.eval.config import EvalAppConfig
from apps.eval.main import main, run
from forge_kernels.config import ConfigError, run_app
from apps.eval.report import MetricsSummary

TINY = Path(__file__).resolve().parents[3] / "configs" / "eval_tiny.yaml"



def check_consistent(report: dict, tasks: int, k: int) -> MetricsSummary:
    """Invariants every report must satisfy, whatever the policy."""
    final = MetricsSummary.model_validate(report["final"])
    assert (final.tasks, final.samples, final.samples_per_task) == (tasks, tasks * k, k)
    assert sum(final.fault_counts.values()) == final.samples
    assert final.correct_rate <= final.compile_rate <= final.extract_rate
    assert final.fault_counts.get("none", 0) == round(final.correct_rate * final.samples)
    assert final.pass_at_k[1] == pytest.approx(final.correct_rate)
    assert sorted(final.pass_at_k) == sorted({1, k})
    assert final.pass_at_k[k] >= final.pass_at_k[1]
    for agg in ("per_sample", "best_of_n"):
        for baseline in ("eager", "compile"):
            assert set(final.fast_p[agg][baseline]) == {0.0, 1.0, 1.2, 1.5, 2.0}
    assert final.fast_p["per_sample"]["eager"][0.0] == pytest.approx(final.correct_rate)
    assert final.fast_p["best_of_n"]["eager"][0.0] == pytest.approx(final.pass_at_k[k])
    rows = report["per_task"]
    assert [r["task"] for r in rows] == report["tasks"] and len(rows) == tasks
    assert sum(r["correct"] for r in rows) == final.fault_counts.get("none", 0)
    assert sum(r["compiled"] for r in rows) == round(final.compile_rate * final.samples)
    turns = report["turns"]
    assert len(report["per_turn"]) == turns
    assert report["per_turn"][-1]["last"] == report["final"]
    assert report["per_turn"][-1]["best"] == report["best_over_turns"]
    assert sum(report["stop_reasons"].values()) == tasks * k
    assert {(s["task"], s["sample"]) for s in report["samples"]} == {(t, i) for t in report["tasks"] for i in range(k)}
    assert tasks * k <= len(report["samples"]) <= tasks * k * turns
    best_curve = [t["best"]["correct_rate"] for t in report["per_turn"]]
    assert best_curve == sorted(best_curve)  # best-so-far never drops
    for t in report["per_turn"]:
        assert t["best"]["correct_rate"] >= t["last"]["correct_rate"]
    with open(report["report_path"]) as f:
        on_disk = json.load(f)
    assert on_disk["final"] == report["final"] and on_disk["per_task"] == rows
    with open(report["plot_path"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    return final


def test_tiny_model_on_builtin_tasks(eval_config):
    """The CI run: a random tiny model through the HF generator and the embedded evaluator."""
    cfg = eval_config()
    report = asyncio.run(run(cfg))
    final = check_consistent(report, tasks=2, k=2)
    assert report["policy"].startswith("hf:") and report["policy"].endswith("init_model")
    # 16 random tokens never hold a ```python block: every sample is a no-code failure with reward 0
    assert final.fault_counts == {"no_code": 4}
    assert final.mean_reward == 0.0
    assert all(s["completion_tokens"] > 0 for s in report["samples"])
    assert report["turns"] == 1 and report["stop_reasons"] == {"max_turns": 4}


def test_tiny_model_multi_turn_with_stts(eval_config):
    """Three turns, never stopping early: every episode has three scored turns; later prompts are built
    by STTS (first prompt + the best earlier turn) from the feedback the environment wrote."""
    cfg = eval_config("turns={max_turns: 3, stop_on: never}", "context.window=1")
    report = asyncio.run(run(cfg))
    check_consistent(report, tasks=2, k=2)
    assert report["turns"] == 3 and report["stop_reasons"] == {"max_turns": 4}
    assert report["context"] == {"kind": "stts", "window": 1}
    assert sorted((s["task"], s["sample"], s["turn"]) for s in report["samples"]) == sorted(
        (t, i, turn) for t in report["tasks"] for i in range(2) for turn in (1, 2, 3))


def test_solutions_through_the_cli(eval_config, capsys, tmp_path):
    """The shipped solutions are all correct on the interpreter; speedups are unknown there (n/a)."""
    argv = ["--config", str(TINY), f"run_dir={tmp_path}/run", "policy.source=solutions",
            "env.config.tasks.names=[level1/relu, level1/sigmoid]", "samples_per_task=2"]
    report = run_app(EvalAppConfig, main, argv=argv)
    final = check_consistent(report, tasks=2, k=2)
    assert final.correct_rate == 1.0 and final.fault_counts == {"none": 4}
    assert report["devices"] == ["cpu (triton interpreter)"]
    assert final.fast_p["per_sample"]["eager"][1.0] is None and final.geomean_speedup["eager"] is None
    assert (final.timed_correct, final.untimed_correct) == (0, 4)
    out = capsys.readouterr().out
    assert "correct rate (fast_0)" in out and "fast_1.5" in out and "level1/sigmoid" in out
    assert f"report: {report['report_path']}" in out


@pytest.mark.parametrize(("overrides", "message"), [
    (["pass_k=[1, 3]"], r"pass_k \[3\]: each k must be between 1 and samples_per_task=2"),
    (["policy.generator.engine=openai", "policy.generator.openai={base_url: 'http://x/v1', model: m}"],
     "engine=openai needs policy.path"),
    (["policy.generator.model_path=/somewhere"], "set policy.path instead"),
    (["fast_p=[-1]"], "fast_p thresholds must be >= 0"),
    (["samples_per_task=0"], "samples_per_task"),
    (["policy.source=solutions", "turns.max_turns=2"], "same answer every turn"),
    (["env.config.no_such_key=1"], "no_such_key"),
])
def test_config_errors_name_the_problem(eval_config, overrides, message):
    with pytest.raises(ConfigError, match=message):
        eval_config(*overrides)


def kernelbench(path: Path) -> str:
    return f"env.config.tasks={{source: kernelbench, path: {path}, levels: [1]}}"


def test_bad_policy_path_and_task_source(eval_config, tmp_path):
    with pytest.raises(ConfigError, match="not a Hugging Face checkpoint directory"):
        asyncio.run(run(eval_config(f"policy.path={tmp_path}")))
    with pytest.raises(ConfigError, match="no such folder"):
        asyncio.run(run(eval_config("~env.config.tasks", kernelbench(tmp_path))))
    with pytest.raises(ConfigError, match="unknown built-in task"):
        asyncio.run(run(eval_config("env.config.tasks.names=[level1/nope]")))


def test_solutions_policy_needs_solutions(eval_config, tmp_path):
    (tmp_path / "kb" / "level1").mkdir(parents=True)
    (tmp_path / "kb" / "level1" / "1_Relu.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        return torch.relu(x)\n\n\ndef get_inputs():\n    return [torch.randn(4, 8)]\n\n\n"
        "def get_init_inputs():\n    return []\n")
    cfg = eval_config("~env.config.tasks", kernelbench(tmp_path / "kb"), "policy.source=solutions")
    with pytest.raises(ConfigError, match=r"these have none: \['level1/1_Relu'\]"):
        asyncio.run(run(cfg))
