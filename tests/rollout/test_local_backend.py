"""run_episodes over the in-process backend (what the eval app uses): real chat template, real ids."""

from __future__ import annotations

from forge_kernels.env.base import Action, Environment, Outcome
from forge_kernels.env.conversation import ConversationTokens
from forge_kernels.rollout import LocalTurnBackend, TurnsConfig, run_episodes
from forge_kernels.types import Completion


class SayOkEnv(Environment):
    """Solved when the reply is 'ok'; feedback quotes the reply."""

    def load_tasks(self):
        return ["t"]

    def initial_messages(self, task):
        return [{"role": "system", "content": "be brief"}, {"role": "user", "content": "say ok"}]

    def parse_action(self, task, text):
        return Action(True, text)

    async def score(self, task, action):
        ok = action.content == "ok"
        return Outcome(float(ok), ok, f"you said {action.content!r}", {"correct": ok})


def test_episode_prompts_decode_to_the_whole_chat(tokenizer, run):
    replies = iter(["no", "maybe", "ok"])
    eos = tokenizer.eos_token_id

    async def generate(prompts, n):
        out = []
        for p in [p for p in prompts for _ in range(n)]:
            text = next(replies)
            ids = tokenizer.encode(text, add_special_tokens=False) + [eos]
            out.append(Completion(p, ids, text, [-0.1] * len(ids), 0))
        return out

    env = SayOkEnv()
    backend = LocalTurnBackend.for_environment(generate, env, ConversationTokens(tokenizer))
    (ep,) = run(run_episodes("t", backend.initial_ids("t"), 1, backend, TurnsConfig(max_turns=5), group_id="g"))
    assert [t.reward for t in ep.turns] == [0.0, 0.0, 1.0] and ep.stop_reason == "done"
    last = ep.turns[-1].completion
    expected = ("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nsay ok<|im_end|>\n"
                "<|im_start|>assistant\nno<|im_end|>\n<|im_start|>user\nyou said 'no'<|im_end|>\n"
                "<|im_start|>assistant\nmaybe<|im_end|>\n<|im_start|>user\nyou said 'maybe'<|im_end|>\n"
                "<|im_start|>assistant\n")
    assert tokenizer.decode(last.prompt_ids) == expected
    assert backend.generated_tokens == sum(len(t.completion.token_ids) for t in ep.turns)
