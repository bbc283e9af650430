"""Repair conversations for the SFT cold start: failed attempts, the evaluator's real feedback on
each, then the reference solution.

A model trained only on (prompt, solution) pairs has never seen a feedback turn; in multi-turn
episodes it answers feedback with an empty code block, so later turns never succeed and TRLOO has
no later-turn signal. Each repair conversation is::

    [system, user: task]  assistant: <broken attempt>  user: <feedback>  ...  assistant: <solution>

with one failed attempt per ``kinds`` entry, or several in a row per ``chains`` entry (the context
of a later turn). The broken attempts are made from the task's own solution (``truncated``: cut
mid-way, like a reply that hit ``max_tokens``), another task's solution (``other_task``: runs,
wrong values or arity) or a reply without code (``no_code``). Each is scored by the real
environment (:class:`TritonKernelEnv` with the SFT prompts), so the feedback is exactly what a
multi-turn episode would show; a conversation with an attempt that happens to pass is dropped.
:func:`apps.sft.data.repair_example` tokenises them as the rollout does, and the loss covers the
final solution only: the broken attempts are context, never a target.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator

from forge_kernels.config import StrictModel
from forge_kernels.env.base import ChatMessage, Outcome
from forge_kernels.env.kernel_eval import EmbeddedEvalConfig, EvalConfig
from forge_kernels.env.prompts import PromptConfig
from forge_kernels.env.triton import TritonKernelEnv
from forge_kernels.eval.results import EvalOptions
from forge_kernels.tasks import Task

__all__ = ["AttemptKind", "RepairConfig", "RepairConversation", "broken_attempt", "make_repairs"]

AttemptKind = Literal["truncated", "other_task", "no_code"]


class RepairConfig(StrictModel):
    """Which failed attempts to add per task, and how they are scored (match the multi-turn GRPO
    config's ``env.config.eval.options`` and ``feedback_chars``, so the feedback reads the same)."""

    kinds: list[AttemptKind] = Field(
        default_factory=lambda: ["truncated", "other_task"], min_length=1,
        description="failed first attempts per task: truncated (own solution cut), other_task (another "
                    "task's solution), no_code (a reply without a code block)")
    chains: list[list[AttemptKind]] = Field(
        default_factory=list,
        description="several failed attempts in a row before the solution, e.g. [[truncated, other_task]]: "
                    "examples of a later turn, whose context holds more than one failure")
    feedback_chars: int = Field(default=600, ge=100, description="feedback text is trimmed to this")
    eval: EvalConfig = Field(
        default_factory=lambda: EmbeddedEvalConfig(options=EvalOptions(trials=1, alt_shape_trials=1, timeout_s=30)),
        description="how the broken attempts are evaluated")
    concurrency: int = Field(default=2, ge=1, description="attempts evaluated at once")
    seed: int = 0

    @field_validator("chains")
    @classmethod
    def _chains_have_failures(cls, chains: list[list[AttemptKind]]) -> list[list[AttemptKind]]:
        if any(not chain for chain in chains):
            raise ValueError("a chain lists at least one failed attempt, got an empty one")
        return chains

    def sequences(self) -> list[list[AttemptKind]]:
        """Every conversation's failed attempts, in order: one per kind, then the chains."""
        return [[kind] for kind in self.kinds] + [list(chain) for chain in self.chains]


@dataclass
class RepairConversation:
    """Failed attempts at ``task``, each with the feedback it got, before the solution."""

    task: Task
    kinds: list[AttemptKind]
    attempts: list[str]             # the assistant's replies (text), in turn order
    feedbacks: list[ChatMessage]    # the user message after each attempt

    @property
    def name(self) -> str:
        return f"{self.task.name}/repair-{'+'.join(self.kinds)}"

    def texts(self) -> list[str]:
        """Texts for the tokenizer corpus (the task prompt and solution come from the plain SFT data)."""
        return [*self.attempts, *(f["content"] for f in self.feedbacks)]


def broken_attempt(task: Task, kind: AttemptKind, tasks: Sequence[Task], rng: random.Random) -> str | None:
    """The assistant text of a failed attempt of ``kind`` (None when ``kind`` cannot be made)."""
    if kind == "no_code":
        return "I will write the kernel now."
    if kind == "truncated":
        lines = (task.solution or "").strip().splitlines()
        if len(lines) < 4:
            return None
        cut = rng.randrange(len(lines) // 3, 2 * len(lines) // 3 + 1)  # the middle third
        return "```python\n" + "\n".join(lines[:cut]) + "\n```"
    others = [t for t in tasks if t.name != task.name and t.solution]
    if not others:
        return None
    return "```python\n" + rng.choice(others).solution.strip() + "\n```"


async def make_repairs(tasks: Sequence[Task], cfg: RepairConfig, prompt: PromptConfig) -> list[RepairConversation]:
    """Score the failed attempts of every (task with a solution, sequence of kinds); keep the
    conversations whose attempts all really failed."""
    solved = [t for t in tasks if t.solution]
    rng = random.Random(cfg.seed)
    wanted: list[tuple[Task, list[AttemptKind], list[str]]] = []
    for task in solved:
        for kinds in cfg.sequences():
            texts = [broken_attempt(task, kind, solved, rng) for kind in kinds]
            if None not in texts:
                wanted.append((task, kinds, texts))
    env = TritonKernelEnv(TritonKernelEnv.Config(prompt=prompt, eval=cfg.eval, feedback_chars=cfg.feedback_chars))
    slots = asyncio.Semaphore(cfg.concurrency)

    async def score(task: Task, text: str) -> Outcome:
        async with slots:
            return await env.step(task, text)

    await env.setup()
    try:  # an attempt's score does not depend on the turns before it: score them all at once
        outcomes = await asyncio.gather(*(asyncio.gather(*(score(task, t) for t in texts))
                                          for task, _, texts in wanted))
    finally:
        await env.close()
    return [RepairConversation(task, kinds, texts, [env.feedback_message(task, o) for o in scored])
            for (task, kinds, texts), scored in zip(wanted, outcomes, strict=True)
            if not any(o.success for o in scored)]
