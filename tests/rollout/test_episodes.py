"""The lock-step episode driver with a scripted policy, scorer and environment."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from actors.engines.batching import collate_turns
from forge_kernels.env.base import Action, Environment, Outcome
from forge_kernels.env.conversation import ConversationTokens
from forge_kernels.rollout import Continuation, EnvTurnFeedback, STTSContext, TurnsConfig, run_episodes
from forge_kernels.types import Completion

INITIAL = [1, 2, 3]
EOS = 9


@dataclass
class ScriptedBackend:
    """Turn k of the episode at position j (among those still active) samples ``[100k + j, EOS]``;
    ``rewards[(k, token)]`` scripts the reward (default 0) and ``done`` the tokens that solve the task."""

    rewards: dict[int, float | None] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    prompts: list[list[list[int]]] = field(default_factory=list)

    async def generate(self, prompts, n):
        prompts = [p for p in prompts for _ in range(n)]  # the first turn: one prompt, n samples
        self.prompts.append(prompts)
        k = len(self.prompts)
        return [Completion(list(p), [100 * k + j, EOS], f"reply {100 * k + j}", [-0.5, -0.1], policy_version=7 - k)
                for j, p in enumerate(prompts)]

    async def score(self, task, completions):
        outs = []
        for c in completions:
            tok = c.token_ids[0]
            outs.append(Outcome(self.rewards.get(tok, 0.0), tok in self.done, f"feedback on {tok}", {"correct": tok in self.done}))
        return outs

    async def continue_turns(self, task, completions, outcomes):
        return [Continuation(o.success, [50, c.token_ids[0]]) for c, o in zip(completions, outcomes)]


def test_group_runs_in_lock_step_and_stops_when_done(run):
    # turn 1: tokens 100, 101, 102 (episode 0 solves); turn 2: 200 (ep 1, solves), 201 (ep 2); turn 3: 300 (ep 2)
    backend = ScriptedBackend(rewards={100: 1.0, 200: 1.0, 101: 0.2}, done={100, 200})
    eps = run(run_episodes("task", INITIAL, 3, backend, TurnsConfig(max_turns=3), group_id="g", task_name="t"))
    assert [len(p) for p in backend.prompts] == [3, 2, 1]  # one generate call per turn, active episodes only
    assert [len(ep.turns) for ep in eps] == [1, 2, 3]
    assert [ep.rewards for ep in eps] == [[1.0], [0.2, 1.0], [0.0, 0.0, 0.0]]
    assert [t.completion.token_ids[0] for t in eps[2].turns] == [102, 201, 300]


def test_stop_reasons_and_turn_info(run):
    backend = ScriptedBackend(done={100, 200})
    eps = run(run_episodes("task", INITIAL, 3, backend, TurnsConfig(max_turns=3), group_id="g", task_name="t"))
    # 100 solves at turn 1; 101 -> 200 solves at turn 2; 102 -> 201 -> 300 runs out of turns
    assert [len(ep.turns) for ep in eps] == [1, 2, 3]
    assert [ep.stop_reason for ep in eps] == ["done", "done", "max_turns"]
    assert [t.index for t in eps[2].turns] == [1, 2, 3]
    assert [ep.episode_id for ep in eps] == ["g-0", "g-1", "g-2"] and {ep.group_id for ep in eps} == {"g"}
    assert eps[2].policy_version == 4  # the oldest turn's version (turn 3 was stamped 7 - 3)


def test_next_prompt_is_previous_sequence_plus_boundary(run):
    backend = ScriptedBackend()
    eps = run(run_episodes("task", INITIAL, 2, backend, TurnsConfig(max_turns=3, stop_on="never"),
                           group_id="g", task_name="t"))
    ep = eps[1]
    assert ep.turns[1].completion.prompt_ids == INITIAL + [101, EOS] + [50, 101]
    assert ep.turns[2].completion.prompt_ids == INITIAL + [101, EOS, 50, 101] + [201, EOS, 50, 201]
    assert all(e.is_prefix_chained() for e in eps)
    batch = collate_turns(eps, pad_id=0)
    assert len(batch) == 2  # one row per episode
    assert batch.target_ids[1][batch.loss_mask[1]].tolist() == [101, EOS, 201, EOS, 301, EOS]


def test_stop_on_never_ignores_done(run):
    backend = ScriptedBackend(done={100, 101})
    eps = run(run_episodes("task", INITIAL, 2, backend, TurnsConfig(max_turns=2, stop_on="never"),
                           group_id="g", task_name="t"))
    assert [len(ep.turns) for ep in eps] == [2, 2]


def test_context_cap_stops_before_a_turn_that_would_not_fit(run):
    # turn-2 prompt: 3 + 2 + 2 = 7 ids; turn-3 prompt: 11 ids. Budget 3 response tokens, cap 10:
    # turn 2 fits (7 + 3 <= 10), turn 3 does not (11 + 3 > 10)
    backend = ScriptedBackend()
    eps = run(run_episodes("task", INITIAL, 1, backend, TurnsConfig(max_turns=5, max_context_tokens=10, stop_on="never"),
                           group_id="g", task_name="t", response_tokens=3))
    assert len(eps[0].turns) == 2 and eps[0].stop_reason == "context_limit"


def test_scorer_failure_ends_the_episode_and_marks_the_turn_invalid(run):
    backend = ScriptedBackend(rewards={101: None})
    eps = run(run_episodes("task", INITIAL, 2, backend, TurnsConfig(max_turns=2, stop_on="never"),
                           group_id="g", task_name="t"))
    assert len(eps[1].turns) == 1 and eps[1].turns[0].reward_valid is False
    assert eps[1].stop_reason == "scorer_failed" and eps[1].turns[0].reward == 0.0
    assert len(eps[0].turns) == 2


def test_stts_context_keeps_the_first_prompt_and_the_best_earlier_turns(run):
    # one episode, rewards by turn: 0.5, 0.9, 0.1, then STTS window 1 keeps turn 2 only
    backend = ScriptedBackend(rewards={100: 0.5, 200: 0.9, 300: 0.1})
    eps = run(run_episodes("task", INITIAL, 1, backend, TurnsConfig(max_turns=4, stop_on="never"),
                           group_id="g", task_name="t", context=STTSContext(window=1)))
    prompts = [t.completion.prompt_ids for t in eps[0].turns]
    assert prompts[1] == INITIAL + [100, EOS, 50, 100]
    assert prompts[2] == INITIAL + [200, EOS, 50, 200]  # 0.9 beats 0.5
    assert prompts[3] == INITIAL + [200, EOS, 50, 200]  # 0.1 does not displace it
    assert not eps[0].is_prefix_chained()
    assert len(collate_turns(eps, pad_id=0)) == 4  # unchained: one row per turn


def test_bad_arguments_are_named(run):
    with pytest.raises(ValueError, match="n must be >= 1"):
        run(run_episodes("task", INITIAL, 0, ScriptedBackend(), TurnsConfig(), group_id="g"))
    with pytest.raises(ValueError, match="initial_ids is empty"):
        run(run_episodes("task", [], 1, ScriptedBackend(), TurnsConfig(max_turns=2), group_id="g"))


class EchoEnv(Environment):
    """Solved when the reply says 'ok'; feedback repeats the reply."""

    def load_tasks(self):
        return []

    def initial_messages(self, task):
        return [{"role": "user", "content": "say ok"}]

    def parse_action(self, task, text):
        return Action(True, text)

    async def score(self, task, action):
        return Outcome(1.0 if action.content == "ok" else 0.0, action.content == "ok", f"you said {action.content}")


def test_env_feedback_gives_done_and_template_boundary_ids(tokenizer, run):
    env, conv = EchoEnv(), ConversationTokens(tokenizer)
    eos = tokenizer.eos_token_id
    comps = [Completion([1], tokenizer.encode(t, add_special_tokens=False) + [eos], t, [0.0] * 3, 0) for t in ("ok", "no")]
    outcomes = [run(env.step("task", c.text)) for c in comps]
    conts = EnvTurnFeedback(env, conv).continue_turns("task", comps, outcomes)
    assert [c.done for c in conts] == [True, False]
    assert tokenizer.decode(conts[1].boundary_ids) == "\n<|im_start|>user\nyou said no<|im_end|>\n<|im_start|>assistant\n"
