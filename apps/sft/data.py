"""SFT examples: chat prompts (exactly as the GRPO app renders them) + solutions, tokenised and masked.

Each example is the prompt the generator will be asked (``task_messages`` through the chat
template, ending with the opened assistant turn) followed by the solution in a fenced python block
and ``<|im_end|>``. Prompt and response are tokenised separately, so the prompt ids are the very
ids the generator later starts from, and the loss covers exactly the response ids (the solution
and the end-of-turn token the model must learn to stop with). With ``repair`` set, repair
conversations (``apps/sft/repair.py``) add later-turn examples: failed attempts and their real
feedback in the prompt, the solution as the response.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from pydantic import Field
from transformers import PreTrainedTokenizerBase

from apps.sft.repair import RepairConfig, RepairConversation
from forge_kernels.config import StrictModel
from forge_kernels.env.conversation import ConversationTokens
from forge_kernels.env.prompts import PromptConfig, sft_messages, task_messages
from forge_kernels.tasks import BuiltinTasksConfig, KernelBookExample, Task, load_kernelbook, load_tasks
from forge_kernels.types import Batch

__all__ = [
    "DataConfig",
    "FilterReport",
    "KernelBookConfig",
    "SFTExample",
    "batches",
    "build_examples",
    "collate_sft",
    "load_items",
    "prompt_token_ids",
    "repair_example",
    "tokenize_conversation",
]

log = logging.getLogger(__name__)


class KernelBookConfig(StrictModel):
    """KernelBook-style rows (python_code, triton_code, entry_point) from a file or folder."""

    path: Path
    limit: int | None = Field(default=None, ge=1)
    skip_invalid: bool = Field(default=True, description="skip malformed rows (counted) instead of failing")


class DataConfig(StrictModel):
    """Which (prompt, solution) pairs to train on and which to drop for length."""

    tasks: BuiltinTasksConfig | None = Field(
        default_factory=lambda: BuiltinTasksConfig(levels=[1]),
        description="built-in tasks (their reference solutions); null for none",
    )
    kernelbook: KernelBookConfig | None = None
    max_seq_len: int = Field(default=2048, ge=8, description="drop examples longer than this (prompt + response)")
    max_response_tokens: int | None = Field(default=None, ge=1, description="drop longer responses")
    repair: RepairConfig | None = Field(
        default=None, description="also train on repair conversations (failed attempt, feedback, solution) of "
                                  "the built-in tasks, for multi-turn episodes; null for none")


@dataclass
class SFTExample:
    """One tokenised conversation: the loss covers ``response_ids`` only."""

    name: str
    prompt_ids: list[int]
    response_ids: list[int]

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


@dataclass
class FilterReport:
    """How many examples were kept and, per reason, which were dropped."""

    kept: int = 0
    dropped: dict[str, list[str]] = field(default_factory=dict)

    def drop(self, reason: str, name: str) -> None:
        self.dropped.setdefault(reason, []).append(name)

    @property
    def n_dropped(self) -> int:
        return sum(len(v) for v in self.dropped.values())

    def summary(self) -> str:
        parts = [f"kept {self.kept} example(s), dropped {self.n_dropped}"]
        for reason, names in self.dropped.items():
            shown = ", ".join(names[:5]) + (f", ... (+{len(names) - 5})" if len(names) > 5 else "")
            parts.append(f"  {len(names)} {reason}: {shown}")
        return "\n".join(parts)


def load_items(cfg: DataConfig) -> list[Task | KernelBookExample]:
    """The built-in tasks and KernelBook rows the config names (in that order)."""
    items: list[Task | KernelBookExample] = []
    if cfg.tasks is not None:
        items += load_tasks(cfg.tasks)
    if cfg.kernelbook is not None:
        kb = cfg.kernelbook
        items += load_kernelbook(kb.path, limit=kb.limit, skip_invalid=kb.skip_invalid)
    if not items:
        raise ValueError("the SFT data config selects no examples: set data.tasks and/or data.kernelbook")
    return items


def prompt_token_ids(tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict]) -> list[int]:
    """The ids a generator is given for ``messages``: the chat template with the assistant turn opened."""
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)


def tokenize_conversation(tokenizer: PreTrainedTokenizerBase, messages: Sequence[dict]) -> tuple[list[int], list[int]]:
    """(prompt ids, response ids) of a conversation whose last message is the assistant's.

    The prompt is rendered with ``add_generation_prompt=True`` (what a generator is given); the
    response is the rest of the rendered conversation up to and including the end-of-turn token.
    """
    if not messages or messages[-1]["role"] != "assistant":
        raise ValueError("an SFT conversation must end with an assistant message")
    prompt = tokenizer.apply_chat_template(list(messages[:-1]), tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(list(messages), tokenize=False)
    if not full.startswith(prompt):
        raise ValueError("the chat template renders the prompt differently inside the full conversation; "
                         "cannot separate the assistant turn")
    eos = tokenizer.eos_token
    response = full[len(prompt):]
    end = response.find(eos)
    if end < 0:
        raise ValueError(f"the rendered assistant turn does not end with the eos token {eos!r}")
    response = response[: end + len(eos)]  # the newline after <|im_end|> is never sampled
    return (tokenizer.encode(prompt, add_special_tokens=False),
            tokenizer.encode(response, add_special_tokens=False))


def repair_example(conversation: RepairConversation, tokenizer: PreTrainedTokenizerBase,
                   prompt: PromptConfig) -> SFTExample:
    """A repair conversation as the generator sees the turn after its last failure: the first prompt,
    then per failed attempt its text as a sampled reply (through the end-of-turn token) and its
    feedback joined by :class:`ConversationTokens`, ending with the opened assistant turn; the
    response is the task's solution."""
    messages = task_messages(conversation.task, prompt)
    conversation_ids = ConversationTokens(tokenizer)
    context = prompt_token_ids(tokenizer, messages)
    for attempt, feedback in zip(conversation.attempts, conversation.feedbacks, strict=True):
        _, attempt_ids = tokenize_conversation(tokenizer, [*messages, {"role": "assistant", "content": attempt}])
        context = conversation_ids.extend(context, attempt_ids, feedback)
    _, solution_ids = tokenize_conversation(tokenizer, sft_messages(conversation.task, prompt))
    return SFTExample(conversation.name, context, solution_ids)


def build_examples(items: Sequence[Task | KernelBookExample], tokenizer: PreTrainedTokenizerBase,
                   cfg: DataConfig, prompt: PromptConfig,
                   repairs: Sequence[RepairConversation] = ()) -> tuple[list[SFTExample], FilterReport]:
    """Tokenise every item (then every repair conversation) and drop those without a solution or over
    the length limits."""
    report = FilterReport()
    examples: list[SFTExample] = []
    candidates: list[Task | KernelBookExample | RepairConversation] = [*items, *repairs]
    for item in candidates:
        if isinstance(item, Task) and item.solution is None:
            report.drop("without a reference solution", item.name)
            continue
        if isinstance(item, RepairConversation):
            example = repair_example(item, tokenizer, prompt)
        else:
            example = SFTExample(item.name, *tokenize_conversation(tokenizer, sft_messages(item, prompt)))
        if len(example) > cfg.max_seq_len:
            report.drop(f"longer than max_seq_len={cfg.max_seq_len} tokens", f"{item.name} ({len(example)})")
        elif cfg.max_response_tokens is not None and len(example.response_ids) > cfg.max_response_tokens:
            report.drop(f"with responses longer than max_response_tokens={cfg.max_response_tokens}",
                        f"{item.name} ({len(example.response_ids)})")
        else:
            examples.append(example)
    report.kept = len(examples)
    if not examples:
        raise ValueError(f"length filtering left no SFT examples:\n{report.summary()}")
    return examples, report


def collate_sft(examples: Sequence[SFTExample], pad_id: int, ignore_index: int = -100) -> Batch:
    """Right-padded rows; targets are inputs shifted left; the mask covers the response targets."""
    width = max(len(e) for e in examples)
    rows = len(examples)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    target_ids = torch.full((rows, width), ignore_index, dtype=torch.long)
    loss_mask = torch.zeros((rows, width), dtype=torch.bool)
    for row, ex in enumerate(examples):
        seq = torch.tensor(ex.prompt_ids + ex.response_ids)
        p, n = len(ex.prompt_ids), len(ex.response_ids)
        input_ids[row, : len(seq)] = seq
        target_ids[row, : len(seq) - 1] = seq[1:]
        loss_mask[row, p - 1: p - 1 + n] = True  # position j predicts token j + 1
    zeros = torch.zeros((rows, width))
    return Batch(input_ids=input_ids, target_ids=target_ids, loss_mask=loss_mask,
                 advantages=zeros, generator_logprobs=zeros.clone())


def batches(examples: Sequence[SFTExample], batch_size: int, seed: int) -> Iterator[list[SFTExample]]:
    """Endless batches from seeded, shuffled epochs (a batch may span two epochs)."""
    rng = random.Random(seed)
    order: list[int] = []
    while True:
        while len(order) < batch_size:
            epoch = list(range(len(examples)))
            rng.shuffle(epoch)
            order += epoch
        chosen, order = order[:batch_size], order[batch_size:]
        yield [examples[i] for i in chosen]
