"""The GRPO app end to end on the local backend: both modes, invariants, failures, config errors."""

from __future__ import annotations

import asyncio
import json

import pytest

from apps.grpo.main import GRPOFailed, run
from forge_kernels.config import ConfigError


def test_async_run_writes_documented_metrics(tiny_config, tmp_path):
    cfg = tiny_config("save_final=true")
    history = asyncio.run(run(cfg))
    assert len(history) == cfg.steps
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(cfg.steps))
    for key in ("reward/total/mean", "reward/correct/mean", "reward/compiled/mean", "loss/total/mean",
                "loss/entropy/mean", "train/staleness_max/max", "train/logprob_diff_max/max",
                "perf/gen_tokens_per_s/mean", "train/version/mean"):
        assert key in rows[-1], key
    assert rows[-1]["train/version/mean"] == cfg.steps
    assert all(r["train/staleness_max/max"] <= cfg.buffer.max_policy_age for r in rows)
    assert (tmp_path / "run" / "final" / "config.json").is_file()


def test_sync_invariants_ratio_one_and_zero_kl_at_start(tiny_config, rewards):
    """slime's CI checks: every sync step trains on its own version's samples, so the trainer's
    recomputed logprobs equal the generator's; the reference (= the start policy) has KL 0 at step 0."""
    cfg = tiny_config("mode=sync", "steps=3", "use_reference=true", "trainer.optim.lr=0.05",
                      "rollout.group_size=4", "generator.sampling.max_tokens=12")
    history = asyncio.run(run(cfg, classes={"reward": rewards["even"]}))
    assert len(history) == 3
    for step in history:
        assert step["train/fresh_logprob_diff_max/max"] < 1e-4
        assert step["train/staleness_max/max"] == 0
        assert step["loss/ratio_mean/mean"] == pytest.approx(1.0, abs=1e-4)
    assert history[0]["loss/ref_kl/mean"] == pytest.approx(0.0, abs=1e-7)
    assert history[-1]["loss/ref_kl/mean"] > 1e-5  # the policy moved, so KL to the reference grows


def test_actor_failure_stops_the_run_with_its_name(tiny_config, rewards):
    cfg = tiny_config("steps=4")
    with pytest.raises(GRPOFailed, match=r"BrokenReward\[0\]\.score .*reward backend exploded"):
        asyncio.run(run(cfg, classes={"reward": rewards["broken"]}))


def test_config_errors_name_the_problem(tiny_config):
    with pytest.raises(ConfigError, match=r"trainer.loss.temperature \(1.0\) must equal generator.sampling.temperature"):
        tiny_config("generator.sampling.temperature=0.7")
    with pytest.raises(ConfigError, match="loss 'trloo' needs 'trloo'"):
        tiny_config("trainer.loss={name: trloo}", "advantages.estimator=grpo")
    with pytest.raises(ConfigError, match="use_reference is false"):
        tiny_config("use_reference=false", "trainer.loss.beta=0.1")
    with pytest.raises(ConfigError, match="cannot import .Buffer. from module .no_such_module."):
        asyncio.run(run(tiny_config("actor_classes.buffer=no_such_module:Buffer")))


def test_prs_in_the_buffer_drops_correct_episodes_with_little_kernel_work(tiny_config, rewards, tmp_path):
    """Profiling rejection sampling wired end to end: the reward's profiling ratio travels in the
    turn to the buffer, which drops the correct episodes whose ratio is below tau (half of them)."""
    cfg = tiny_config("mode=sync", "steps=2", "rollout.group_size=4", "rollout.groups_per_step=2",
                      "buffer.prs={tau: 0.3, scale: 0.1}")
    history = asyncio.run(run(cfg, classes={"reward": rewards["profiled"]}))
    assert [h["buffer/prs_rejected/sum"] for h in history] == [4.0, 4.0]  # 2 of 4 in each of 2 groups
    assert [h["buffer/filtered_items/sum"] for h in history] == [0.0, 0.0]
