"""Repair conversations for the SFT cold start: a failed first attempt, the evaluator's real
feedback on it, then the reference solution.

A model trained only on (prompt, solution) pairs has never seen a feedback turn; in multi-turn
episodes it answers feedback with an empty code block, so later turns never succeed and TRLOO has
no later-turn signal. Each repair conversation is::

    [system, user: task]  assistant: <broken attempt>  user: <feedback>  assistant: <solution>

The broken attempts are made from the task's own solution (``truncated``: cut mid-way, like a reply
that hit ``max_tokens``), another task's solution (``other_task``: runs, wrong values) or a reply
without code (``no_code``). Each is scored by the real environment (:class:`TritonKernelEnv` with
the SFT prompts), so the feedback is exactly what a multi-turn episode would show; an attempt
that happens to be correct is dropped. :func:`apps.sft.data.repair_example` tokenises them as the
rollout does, and the loss covers the final solution only: the broken attempt is context, never
a target.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

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
    feedback_chars: int = Field(default=600, ge=100, description="feedback text is trimmed to this")
    eval: EvalConfig = Field(
        default_factory=lambda: EmbeddedEvalConfig(options=EvalOptions(trials=1, alt_shape_trials=1, timeout_s=30)),
        description="how the broken attempts are evaluated")
    concurrency: int = Field(default=2, ge=1, description="attempts evaluated at once")
    seed: int = 0


@dataclass
class RepairConversation:
    """One scored failed attempt of ``task`` and the feedback it got."""

    task: Task
    kind: AttemptKind
    attempt: str     # the assistant's first reply (text)
    feedback: ChatMessage

    @property
    def name(self) -> str:
        return f"{self.task.name}/repair-{self.kind}"

    def texts(self) -> list[str]:
        """Texts for the tokenizer corpus (the task prompt and solution come from the plain SFT data)."""
        return [self.attempt, self.feedback["content"]]


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
    """Score one failed attempt per (task with a solution, kind); keep those that really failed."""
    solved = [t for t in tasks if t.solution]
    rng = random.Random(cfg.seed)
    wanted = [(task, kind, broken_attempt(task, kind, solved, rng)) for task in solved for kind in cfg.kinds]
    wanted = [(task, kind, text) for task, kind, text in wanted if text is not None]
    env = TritonKernelEnv(TritonKernelEnv.Config(prompt=prompt, eval=cfg.eval, feedback_chars=cfg.feedback_chars))
    slots = asyncio.Semaphore(cfg.concurrency)

    async def score(task: Task, text: str) -> Outcome:
        async with slots:
            return await env.step(task, text)

    await env.setup()
    try:
        outcomes = await asyncio.gather(*(score(task, text) for task, _, text in wanted))
    finally:
        await env.close()
    return [RepairConversation(task, kind, text, env.feedback_message(task, outcome))
            for (task, kind, text), outcome in zip(wanted, outcomes, strict=True) if not outcome.success]
