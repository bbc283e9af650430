"""The environment interface: what the rollout loop and the reward actor need from a task family.

An :class:`Environment` owns everything specific to one kind of task — Triton kernels, CUDA
kernels, or a user's own verifiable task:

* ``load_tasks()``            the tasks (anything picklable with ``name`` and ``level``);
* ``initial_messages(task)``  the chat prompt of a task's first turn;
* ``parse_action(task, text)``  a completion's text -> an :class:`Action` (e.g. extracted code);
* ``score(task, action)``     the action's :class:`Outcome`: reward, success, feedback, facts;
* ``feedback_message(task, outcome)``  the user message shown before the next turn;
* ``is_done(task, outcome)``  whether an episode may stop early after this turn.

The framework owns the rest: sampling tasks, tokenising, generation, multi-turn bookkeeping,
advantages and training. Environments are registered by name (:func:`register_environment`) and
chosen in YAML with ``env: {name: triton, config: {...}}``; ``name`` may also be an import path
``"package.module:ClassName"`` to a user's own subclass.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from forge_kernels.config import StrictModel, format_validation_error
from forge_kernels.env.prompts import ChatMessage
from forge_kernels.registry import Registry

__all__ = [
    "ENVIRONMENTS",
    "Action",
    "EnvSpec",
    "EnvTask",
    "Environment",
    "Outcome",
    "build_environment",
    "environment_class",
    "environment_names",
    "register_environment",
]


class EnvTask(Protocol):
    """What the framework reads from a task: a unique name and a curriculum level."""

    name: str
    level: int


TaskT = TypeVar("TaskT", bound=EnvTask)


@dataclass
class Action:
    """A completion turned into something the environment can score.

    ``ok`` False: nothing scoreable was found (``message`` says why, shown to the model as
    feedback; ``failure`` is a short class name for metrics, e.g. ``"no_code_block"``).
    """

    ok: bool
    content: Any = None
    message: str = ""
    failure: str | None = None


@dataclass
class Outcome:
    """The result of scoring one action.

    ``reward`` None means the *scorer* failed (not the policy): the sample is dropped from the
    group statistics instead of being punished. ``success`` is the environment's notion of a
    solved task (the default early-stop condition). ``info`` holds small picklable facts that
    become ``Turn.info`` (for kernels: fault, speedup, device). ``metrics`` are the scalars the
    loops log for this turn — ``reward/<key>`` over a batch, ``turn/<k>/<key>`` per turn — so the
    framework never needs to know what they mean (for kernels: extracted, compiled, correct,
    fast_1, fast_1.5). A key some turns of a batch lack counts 0 for them.
    """

    reward: float | None
    success: bool
    feedback: str
    info: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


class Environment(ABC, Generic[TaskT]):
    """One task family. Subclasses set ``name``, may define a nested ``Config`` (a
    :class:`StrictModel`) and implement the abstract methods. Instances live in the dataset and
    reward actors (one per process); ``setup``/``close`` bracket resources such as an eval server.

    ``load_tasks``, ``initial_messages`` and ``parse_action`` must work without ``setup`` (the
    dataset actor never calls it); only ``score`` (and so ``step``) may need it.
    """

    name: ClassVar[str] = ""

    class Config(StrictModel):
        """Environment settings (the YAML ``env.config`` mapping)."""

    def __init__(self, config: StrictModel | None = None) -> None:
        self.config = config if config is not None else self.Config()

    async def setup(self) -> None:
        """Acquire resources (an evaluator, a server); called once before use."""

    async def close(self) -> None:
        """Release what ``setup`` acquired."""

    @abstractmethod
    def load_tasks(self) -> Sequence[TaskT]:
        """Every task of this environment (names unique)."""

    @abstractmethod
    def initial_messages(self, task: TaskT) -> list[ChatMessage]:
        """The chat messages of the first turn (system prompt included)."""

    @abstractmethod
    def parse_action(self, task: TaskT, text: str) -> Action:
        """Turn the model's reply into an action (reasoning/thinking stripped as needed)."""

    @abstractmethod
    async def score(self, task: TaskT, action: Action) -> Outcome:
        """Score an action with ``action.ok`` True (safe to call concurrently)."""

    def invalid_action_outcome(self, task: TaskT, action: Action) -> Outcome:
        """The outcome of an action that could not be parsed (default: reward 0, its message).
        ``info["parse_failure"]`` names the failure (the reward actor counts it); overrides keep it."""
        return Outcome(0.0, False, action.message, {"parse_failure": action.failure or "invalid_action"})

    async def step(self, task: TaskT, text: str) -> Outcome:
        """Parse then score one reply: the reward actor's single entry point."""
        action = self.parse_action(task, text)
        if not action.ok:
            return self.invalid_action_outcome(task, action)
        return await self.score(task, action)

    def tokenizer_corpus(self, tasks: Sequence[TaskT]) -> list[str]:
        """Texts a locally built tokenizer is trained on: every first-turn message, plus each task's
        ``solution`` where it has one (so answers tokenise as compactly as prompts)."""
        corpus = [m["content"] for task in tasks for m in self.initial_messages(task)]
        return corpus + [s for task in tasks if isinstance(s := getattr(task, "solution", None), str)]

    def feedback_message(self, task: TaskT, outcome: Outcome) -> ChatMessage:
        """The user message that opens the next turn."""
        return {"role": "user", "content": outcome.feedback}

    def is_done(self, task: TaskT, outcome: Outcome) -> bool:
        """Whether the episode may stop after this turn (default: the task is solved)."""
        return outcome.success


class EnvSpec(StrictModel):
    """The YAML ``env`` section: which environment, and its settings."""

    name: str = Field(default="triton", description="a registered environment, or 'package.module:ClassName'")
    config: dict[str, Any] = Field(default_factory=dict, description="the environment's own Config fields")

    # a bad name or config key must fail when the YAML is loaded, not when an actor starts
    @field_validator("name")
    @classmethod
    def _resolvable(cls, name: str) -> str:
        environment_class(name)
        return name

    @field_validator("config")
    @classmethod
    def _fits(cls, config: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if "name" in info.data:  # else the name already failed
            _validate_config(info.data["name"], config)
        return config

    def environment_class(self) -> type[Environment]:
        return environment_class(self.name)

    def validated_config(self) -> StrictModel:
        """``config`` validated against the environment's ``Config``."""
        return _validate_config(self.name, self.config)


def _validate_config(name: str, config: dict[str, Any]) -> StrictModel:
    cls = environment_class(name)
    try:
        return cls.Config.model_validate(config)
    except ValidationError as err:
        problems = format_validation_error(cls.Config, err).splitlines()[1:]
        raise ValueError(f"does not fit environment {name!r} ({cls.__qualname__}.Config):\n"
                         + "\n".join(p.replace("  ", "    env.config.", 1) for p in problems)) from None


EnvT = TypeVar("EnvT", bound=type[Environment])


def _check(cls: Any) -> str | None:
    return None if isinstance(cls, type) and issubclass(cls, Environment) else f"needs an Environment subclass, got {cls!r}"


def _named(name: str, cls: type[Environment]) -> None:
    cls.name = name


def _load_builtin_environments() -> None:
    # registration happens on import; built-ins are imported lazily to keep this module light
    importlib.import_module("forge_kernels.env.builtin")


ENVIRONMENTS: Registry[type[Environment]] = Registry("environment", check=_check, on_register=_named,
                                                     load_builtins=_load_builtin_environments)


def register_environment(name: str) -> Callable[[EnvT], EnvT]:
    """Class decorator: make an environment selectable as ``env.name: <name>``."""
    return ENVIRONMENTS.register(name)  # type: ignore[return-value]


def environment_names() -> list[str]:
    """Registered environment names."""
    return ENVIRONMENTS.names()


def environment_class(name: str) -> type[Environment]:
    """The environment class for a registered ``name`` or a ``"package.module:ClassName"`` path."""
    return ENVIRONMENTS.get(name, "env.name")


def build_environment(spec: EnvSpec) -> Environment:
    """An environment instance for ``spec`` (not yet set up)."""
    return spec.environment_class()(spec.validated_config())
