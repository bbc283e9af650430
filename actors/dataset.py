"""The dataset actor: an environment's tasks in shuffled epochs, a level curriculum, prompts as ids.

The tasks and their first-turn chat messages come from the environment (``env`` section); this
actor owns the order. Each ``sample(policy_version)`` returns the next task of the current epoch
among the levels the curriculum allows at that version, with its messages rendered through the
checkpoint's chat template and tokenised, so the generator and trainer see exactly the same ids.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from actors.common import load_tokenizer
from forge_kernels.config import StrictModel
from forge_kernels.env.base import EnvSpec, Outcome, build_environment
from forge_kernels.env.conversation import ConversationTokens
from forge_kernels.rollout.backends import Continuation, EnvTurnFeedback
from forge_kernels.env.prompts import ChatMessage
from forge_kernels.runtime import Actor, endpoint
from forge_kernels.types import Completion

__all__ = ["CurriculumStage", "DatasetActor", "TaskSample"]


def _jsonable(rng_state: tuple) -> list:
    version, internal, gauss = rng_state
    return [version, list(internal), gauss]


class CurriculumStage(StrictModel):
    """From policy version ``from_version`` on, draw tasks of these ``levels``."""

    from_version: int = Field(ge=0)
    levels: list[int] = Field(min_length=1)


@dataclass
class TaskSample:
    """One prompt to roll out: the task, its prompt ids, and the id of its group of samples.

    ``messages`` are the chat messages ``prompt_ids`` were rendered from (later turns extend them).
    """

    task: Any  # the environment's task type (has ``name`` and ``level``)
    prompt_ids: list[int]
    group_id: str
    epoch: int
    messages: list[ChatMessage]


class DatasetActor(Actor):
    """Serves tasks in seeded, shuffled epochs, filtered by the curriculum stage."""

    class Config(StrictModel):
        model_path: str = Field(default="", description="checkpoint directory whose tokenizer renders prompts; the GRPO app fills it in")
        env: EnvSpec = Field(default_factory=EnvSpec,
                             description="the environment whose tasks are served; the GRPO app fills it in")
        seed: int = 0
        shuffle: bool = True
        curriculum: list[CurriculumStage] = Field(
            default_factory=list, description="stages sorted by from_version; empty: every level always"
        )
        max_prompt_tokens: int | None = Field(default=None, ge=1, description="skip tasks with longer prompts")

        @model_validator(mode="after")
        def _sorted_stages(self) -> DatasetActor.Config:
            versions = [s.from_version for s in self.curriculum]
            if versions != sorted(versions) or (versions and versions[0] != 0):
                raise ValueError(f"curriculum stages must be sorted by from_version and start at 0, got {versions}")
            return self

    async def setup(self) -> None:
        cfg = self.config
        self.tokenizer = load_tokenizer(cfg.model_path)
        self.env = build_environment(cfg.env)  # tasks and prompts only: no setup (no evaluator) here
        self.turn_feedback = EnvTurnFeedback(self.env, ConversationTokens(self.tokenizer))  # multi-turn
        tasks = list(self.env.load_tasks())
        self.prompts: dict[str, tuple[list[ChatMessage], list[int]]] = {}
        for task in tasks:
            messages = self.env.initial_messages(task)
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                     tokenize=True, return_dict=False)
            if cfg.max_prompt_tokens is None or len(ids) <= cfg.max_prompt_tokens:
                self.prompts[task.name] = (messages, list(ids))
        self.tasks = [t for t in tasks if t.name in self.prompts]
        if not self.tasks:
            raise ValueError(f"no task left (environment {cfg.env.name!r} gave {len(tasks)}; "
                             f"max_prompt_tokens={cfg.max_prompt_tokens})")
        for stage in cfg.curriculum:
            if not any(t.level in stage.levels for t in self.tasks):
                raise ValueError(f"curriculum stage {stage.model_dump()} matches none of the loaded tasks' levels "
                                 f"{sorted({t.level for t in self.tasks})}")
        self.rng = random.Random(cfg.seed)
        self.epoch = 0
        self._order: list[Any] = []
        self._levels: tuple[int, ...] | None = None
        self._next_group = 0

    def _stage_levels(self, policy_version: int) -> tuple[int, ...] | None:
        stages = [s for s in self.config.curriculum if s.from_version <= policy_version]
        return tuple(sorted(stages[-1].levels)) if stages else None

    @endpoint
    async def sample(self, policy_version: int = 0) -> TaskSample:
        """The next task of the current epoch (a new shuffled epoch when one runs out)."""
        levels = self._stage_levels(policy_version)
        if levels != self._levels:  # a new curriculum stage starts a fresh epoch
            self._levels, self._order = levels, []
        if not self._order:
            pool = [t for t in self.tasks if levels is None or t.level in levels]
            if self.config.shuffle:
                self.rng.shuffle(pool)
            self._order = pool
            self.epoch += 1
        task = self._order.pop(0)
        messages, ids = self.prompts[task.name]
        group = self._next_group
        self._next_group += 1
        return TaskSample(task, ids, f"g{group}-{task.name}", self.epoch, messages)

    @endpoint
    async def continue_turns(self, task: Any, completions: list[Completion],
                             outcomes: list[Outcome]) -> list[Continuation]:
        """Multi-turn: for each scored turn, ``env.is_done`` and the ids that open the next turn
        (the chat template's boundary and ``env.feedback_message``), rendered with this tokenizer."""
        return self.turn_feedback.continue_turns(task, completions, outcomes)

    @endpoint
    async def save_state(self, path: str) -> None:
        """Write the position in the task stream (epoch, the rest of the current order, the next
        group id, the curriculum stage) and the shuffling RNG into ``path`` (``dataset.json``)."""
        state = {"rng": _jsonable(self.rng.getstate()), "epoch": self.epoch, "order": [t.name for t in self._order],
                 "levels": self._levels, "next_group": self._next_group}
        (Path(path) / "dataset.json").write_text(json.dumps(state))

    @endpoint
    async def load_state(self, path: str) -> None:
        """Continue the task stream where :meth:`save_state` left it."""
        state = json.loads((Path(path) / "dataset.json").read_text())
        by_name = {t.name: t for t in self.tasks}
        missing = [n for n in state["order"] if n not in by_name]
        if missing:
            raise ValueError(f"checkpoint {path!r}: its dataset position names tasks this run does not load: "
                             f"{missing[:5]}")
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.epoch, self._next_group = state["epoch"], state["next_group"]
        self._order = [by_name[n] for n in state["order"]]
        self._levels = None if state["levels"] is None else tuple(state["levels"])

    @endpoint
    async def num_tasks(self) -> int:
        """Tasks available (after prompt-length filtering)."""
        return len(self.tasks)
