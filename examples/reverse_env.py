"""A complete environment in one small file: "reply with this word spelled backwards".

Select it from YAML by import path (configs/tutorial_env.yaml):

    env:
      name: examples.reverse_env:ReverseWordEnv
      config: {words: [apple, river, stone], partial_credit: true}

Exact answers earn 1; with ``partial_credit`` a near miss earns its character similarity to the
answer (difflib's ratio), which gives a tiny model a gradient to climb long before it is exact.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from pydantic import Field

from forge_kernels.config import StrictModel
from forge_kernels.env.base import Action, Environment, Outcome
from forge_kernels.env.extraction import strip_thinking
from forge_kernels.env.prompts import ChatMessage

WORDS = ["apple", "river", "stone", "cloud", "tiger", "bread", "light", "green"]


@dataclass(frozen=True)
class WordTask:
    name: str  # the framework needs a unique name and a curriculum level
    level: int
    word: str

    @property
    def answer(self) -> str:
        return self.word[::-1]


class ReverseWordEnv(Environment[WordTask]):
    """One task per word; the answer is the word reversed."""

    class Config(StrictModel):
        words: list[str] = Field(default_factory=lambda: list(WORDS), min_length=1)
        partial_credit: bool = Field(default=True, description="reward near misses by similarity")

    def load_tasks(self) -> list[WordTask]:
        return [WordTask(f"reverse/{w}", 1, w) for w in self.config.words]

    def initial_messages(self, task: WordTask) -> list[ChatMessage]:
        return [{"role": "system", "content": "Reply with the given word spelled backwards, nothing else."},
                {"role": "user", "content": f"Word: {task.word}"}]

    def parse_action(self, task: WordTask, text: str) -> Action:
        words = strip_thinking(text).split()
        if not words:
            return Action(False, message="The reply was empty: answer with one word.", failure="empty")
        return Action(True, words[0].strip(".,!\"'").lower())

    async def score(self, task: WordTask, action: Action) -> Outcome:
        exact = action.content == task.answer
        similarity = difflib.SequenceMatcher(None, action.content, task.answer).ratio()
        reward = 1.0 if exact else (similarity if self.config.partial_credit else 0.0)
        feedback = "Correct." if exact else f"Not quite: {action.content!r} is not {task.word!r} reversed."
        return Outcome(reward, exact, feedback, {"similarity": similarity},
                       metrics={"correct": float(exact), "similarity": similarity})  # logged as reward/<key>
