"""SFT repair conversations: failed attempts scored by the real evaluator, tokenised exactly as a
multi-turn episode's second turn, trained on the solution only."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from apps.sft.data import DataConfig, build_examples, collate_sft, load_items, prompt_token_ids, repair_example
from apps.sft.main import SFTConfig, build_repairs, main, tokenizer_corpus
from apps.sft.repair import RepairConfig, RepairConversation, broken_attempt, make_repairs
from forge_kernels.config import ConfigError, load_config
from forge_kernels.env import PromptConfig, task_messages
from forge_kernels.env.conversation import ConversationTokens
from forge_kernels.models.tiny import train_tokenizer
from forge_kernels.tasks import BuiltinTasksConfig

NAMES = ["level1/add", "level1/relu"]
PROMPT = PromptConfig(one_shot=False)


@pytest.fixture(scope="module")
def tasks():
    return load_items(DataConfig(tasks=BuiltinTasksConfig(levels=[1], names=NAMES)))


@pytest.fixture(scope="module")
def repairs(tasks) -> list[RepairConversation]:
    cfg = RepairConfig(kinds=["truncated", "other_task", "no_code"])
    return asyncio.run(make_repairs(tasks, cfg, PROMPT))


@pytest.fixture(scope="module")
def tokenizer(tasks, repairs):
    return train_tokenizer(tokenizer_corpus(tasks, PROMPT, repairs), vocab_size=1024)


def test_broken_attempts_are_made_from_solutions(tasks):
    add, relu = tasks
    rng = random.Random(0)
    truncated = broken_attempt(add, "truncated", tasks, rng)
    body = truncated.removeprefix("```python\n").removesuffix("\n```").splitlines()
    lines = add.solution.strip().splitlines()
    assert body == lines[: len(body)] and len(lines) // 3 <= len(body) <= 2 * len(lines) // 3
    assert broken_attempt(add, "other_task", tasks, rng) == f"```python\n{relu.solution.strip()}\n```"
    assert "```" not in broken_attempt(add, "no_code", tasks, rng)
    assert broken_attempt(add, "other_task", [add], rng) is None  # no other task to borrow from


def test_each_attempt_gets_the_evaluators_real_feedback(repairs):
    by_name = {r.name: r for r in repairs}
    assert all(len(r.attempts) == len(r.feedbacks) == len(r.kinds) == 1 for r in repairs)
    assert sorted(by_name) == sorted(f"{n}/repair-{k}" for n in NAMES for k in ("truncated", "other_task", "no_code"))
    # relu's module on add's two inputs: forward raises, and the feedback keeps the exception
    (wrong,) = by_name["level1/add/repair-other_task"].feedbacks
    assert wrong["role"] == "user" and wrong["content"].startswith("Result: runtime_error.")
    assert "TypeError: ModelNew.forward() takes 2 positional arguments but 3 were given" in wrong["content"]
    assert "no ```python code block found" in by_name["level1/add/repair-no_code"].feedbacks[0]["content"]
    for r in repairs:
        assert len(r.feedbacks[0]["content"]) <= 600  # feedback_chars


def test_an_attempt_that_passes_is_not_a_repair(tasks, monkeypatch):
    """If a 'broken' attempt turns out correct, training on it as a failure would teach nonsense."""
    import apps.sft.repair as repair

    monkeypatch.setattr(repair, "broken_attempt",
                        lambda task, kind, tasks, rng: f"```python\n{task.solution.strip()}\n```")
    assert asyncio.run(make_repairs(tasks[:1], RepairConfig(kinds=["truncated"]), PROMPT)) == []


def test_repair_example_is_the_second_turn_the_generator_sees(repairs, tokenizer):
    conversation = next(r for r in repairs if r.kinds == ["other_task"])
    example = repair_example(conversation, tokenizer, PROMPT)
    first = prompt_token_ids(tokenizer, task_messages(conversation.task, PROMPT))
    attempt_ids = tokenizer.encode(conversation.attempts[0] + "<|im_end|>", add_special_tokens=False)
    # the rollout's own construction: first prompt + the sampled reply + the template's boundary ids
    assert example.prompt_ids == ConversationTokens(tokenizer).extend(first, attempt_ids, conversation.feedbacks[0])
    assert example.prompt_ids[: len(first)] == first
    text = tokenizer.decode(example.prompt_ids)
    assert conversation.feedbacks[0]["content"] in text and text.endswith("<|im_start|>assistant\n")
    assert tokenizer.decode(example.response_ids) == f"```python\n{conversation.task.solution.strip()}\n```<|im_end|>"
    # the loss covers the solution, never the broken attempt
    batch = collate_sft([example], tokenizer.pad_token_id)
    assert batch.target_ids[0][batch.loss_mask[0]].tolist() == example.response_ids


def test_a_chain_is_the_turn_after_two_failures(tasks, tokenizer):
    """[truncated, other_task]: two failed turns in the context, each with its own real feedback."""
    cfg = RepairConfig(kinds=["no_code"], chains=[["truncated", "other_task"]])
    chains = [r for r in asyncio.run(make_repairs(tasks, cfg, PROMPT)) if len(r.kinds) == 2]
    assert [r.name for r in chains] == [f"{n}/repair-truncated+other_task" for n in NAMES]
    chain = chains[0]
    single = RepairConversation(chain.task, chain.kinds[:1], chain.attempts[:1], chain.feedbacks[:1])
    one, two = repair_example(single, tokenizer, PROMPT), repair_example(chain, tokenizer, PROMPT)
    attempt_ids = tokenizer.encode(chain.attempts[1] + "<|im_end|>", add_special_tokens=False)
    assert two.prompt_ids == ConversationTokens(tokenizer).extend(one.prompt_ids, attempt_ids, chain.feedbacks[1])
    assert two.response_ids == one.response_ids
    with pytest.raises(ValueError, match="at least one failed attempt"):
        RepairConfig(chains=[[]])


def test_build_examples_adds_repairs_after_the_plain_pairs(tasks, repairs, tokenizer):
    examples, report = build_examples(tasks, tokenizer, DataConfig(), PROMPT, repairs)
    assert report.kept == len(tasks) + len(repairs)
    assert [e.name for e in examples] == [t.name for t in tasks] + [r.name for r in repairs]
    limit = max(len(e) for e in examples[: len(tasks)])  # the repairs are longer: the filter drops them
    short, report = build_examples(tasks, tokenizer, DataConfig(max_seq_len=limit), PROMPT, repairs)
    assert report.n_dropped > 0 and all(len(e) <= limit for e in short)
    assert [e.name for e in short][: len(tasks)] == [t.name for t in tasks]


def test_sft_app_with_repairs_trains_on_them(tmp_path, capsys):
    overrides = [
        f"output_dir={tmp_path / 'ckpt'}",
        "data.tasks.names=[level1/add,level1/relu]",
        "tokenizer.vocab_size=512",
        "model.tiny={hidden_size: 64, intermediate_size: 128, num_hidden_layers: 1, num_attention_heads: 1}",
        "train.steps=3",
        "train.batch_size=2",
        "data.repair.kinds=[no_code,other_task]",
        f"metrics.backends=[{{type: jsonl, path: {tmp_path / 'metrics.jsonl'}}}]",
    ]
    main(load_config(SFTConfig, "configs/sft_multiturn.yaml", overrides))
    assert "sft repair conversations: 4 scored" in capsys.readouterr().out
    first = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert first["data/examples_kept/mean"] == 2 + 4


def test_repair_config_errors_name_the_bad_value():
    with pytest.raises(ConfigError, match="data.repair.kinds"):
        load_config(SFTConfig, "configs/sft_multiturn.yaml", ["data.repair.kinds=[truncatd]"])
    cfg = load_config(SFTConfig, "configs/sft_multiturn.yaml")
    with pytest.raises(ValueError, match="data.repair needs built-in tasks"):
        build_repairs(cfg, [])  # e.g. KernelBook rows only
