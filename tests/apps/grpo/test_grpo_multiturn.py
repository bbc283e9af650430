"""The GRPO app in multi-turn mode, end to end on the local backend with a tiny model."""

from __future__ import annotations

import asyncio
import json

import pytest

from apps.grpo.main import run


def test_sync_multiturn_trains_on_exactly_the_sampled_tokens(tiny_config, even_share_reward, tmp_path):
    """Each episode is one packed row; in sync mode the trainer's recomputed logprobs must equal the
    generator's on every turn's tokens (same ids, same context), and the reference (= the start
    policy) must give KL 0 at step 0 — both fail if a turn's tokens or context were misplaced."""
    cfg = tiny_config("mode=sync", "steps=2", "use_reference=true", "trainer.optim.lr=0.05",
                      "rollout.group_size=3", "generator.sampling.max_tokens=10",
                      "rollout.turns={max_turns: 3, stop_on: done}",
                      "trainer.loss={name: trloo, beta: 0.01}", "advantages.gamma=0.4")
    history = asyncio.run(run(cfg, classes={"reward": even_share_reward}))
    assert len(history) == 2
    for step in history:
        assert step["train/fresh_logprob_diff_max/max"] < 1e-4
        assert step["loss/ratio_mean/mean"] == pytest.approx(1.0, abs=1e-4)
    assert history[0]["loss/ref_kl/mean"] == pytest.approx(0.0, abs=1e-7)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    for key in ("turn/1/correct/mean", "turn/1/reward/mean", "best/correct/mean", "last/correct/mean",
                "best_by_turn/1/correct/mean", "episode/turns/mean"):
        assert key in last, key
    assert 1.0 <= last["episode/turns/mean"] <= 3.0
    assert any(r.get("turn/3/episodes/mean", 0) >= 1 for r in rows)  # some episodes really ran three turns
    assert last["best/correct/mean"] >= last["last/correct/mean"]
    stops = {k for r in rows for k in r if k.startswith("rollout/stop/")}
    assert stops and stops <= {"rollout/stop/done/sum", "rollout/stop/max_turns/sum"}


def test_multiturn_config_errors_name_the_field(tiny_config):
    from forge_kernels.config import ConfigError

    with pytest.raises(ConfigError, match="max_turns"):
        tiny_config("rollout.turns={max_turns: 0}")
    with pytest.raises(ConfigError, match="stop_on"):
        tiny_config("rollout.turns={max_turns: 2, stop_on: sometimes}")
