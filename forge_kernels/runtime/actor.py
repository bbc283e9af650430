"""The actor model: an :class:`Actor` subclass, its ``Config`` and its ``@endpoint`` methods.

An actor is written once and runs on any backend::

    class Counter(Actor):
        class Config(StrictModel):      # the actor's YAML section
            start: int = 0

        async def setup(self) -> None:  # heavy initialisation, after construction
            self.value = self.config.start

        @endpoint
        async def add(self, x: int) -> int:
            self.value += x
            return self.value

The runtime constructs the actor with its validated config (``self.config``), its ``rank`` in
the mesh and the mesh ``size``, then calls ``setup()`` once before any other endpoint.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, Concatenate, ParamSpec, Protocol, TypeVar

from pydantic import BaseModel

from forge_kernels.config import StrictModel, validate

__all__ = ["Actor", "EmptyConfig", "Endpoint", "endpoint", "endpoint_names", "validate_actor_config"]

P = ParamSpec("P")
R_co = TypeVar("R_co", covariant=True)
_ENDPOINT_MARK = "__forge_endpoint__"


class Endpoint(Protocol[P, R_co]):
    """An ``@endpoint`` method as a type checker sees it: awaitable inside the actor
    (``await self.add(1)``) and, on a handle annotated with the actor class, the verbs of
    :class:`~forge_kernels.runtime.handle.EndpointCall` with the method's own signature."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R_co]: ...

    def one(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R_co]: ...

    def all(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[list[R_co]]: ...

    def broadcast(self, *args: P.args, **kwargs: P.kwargs) -> None: ...


def endpoint(fn: Callable[Concatenate[Any, P], Awaitable[R_co]]) -> Endpoint[P, R_co]:
    """Mark an ``async def`` method of an :class:`Actor` as callable from outside the actor.

    At run time the method is returned unchanged (marked); the :class:`Endpoint` return type is
    what lets an editor follow ``handle.add.one(1)`` to the method and check its arguments."""
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(
            f"@endpoint {getattr(fn, '__qualname__', fn)!r} must be an 'async def' method "
            f"(every endpoint is async so one actor runs the same on every backend)"
        )
    setattr(fn, _ENDPOINT_MARK, True)
    return fn  # type: ignore[return-value]


class EmptyConfig(StrictModel):
    """Config of an actor that takes no settings."""


class Actor:
    """Base class of every actor. Subclasses declare ``Config`` and ``@endpoint`` methods.

    Do not override ``__init__``: put initialisation in :meth:`setup`, which the runtime awaits
    once after construction (on the actor's own process, on the monarch backend).
    """

    Config: ClassVar[type[StrictModel]] = EmptyConfig

    def __init__(self, config: StrictModel, rank: int = 0, size: int = 1) -> None:
        self.config = config
        self.rank = rank
        self.size = size

    async def setup(self) -> None:
        """Heavy initialisation (load a model, open a file); runs once before other endpoints
        (always an endpoint, decorated or not)."""
        return None

    @property
    def name(self) -> str:
        """``ClassName[rank]``: how errors and logs name this actor."""
        return f"{type(self).__name__}[{self.rank}]"


def endpoint_names(cls: type[Actor]) -> frozenset[str]:
    """Names of the endpoints ``cls`` defines or inherits (``setup`` always, even if overridden)."""
    if not inspect.iscoroutinefunction(cls.setup):
        raise TypeError(f"{cls.__name__}.setup must be an 'async def' method")
    return frozenset(
        name for name in dir(cls)
        if getattr(getattr(cls, name, None), _ENDPOINT_MARK, False)
    ) | {"setup"}


def validate_actor_config(cls: type[Actor], config: StrictModel | Mapping[str, Any] | None) -> StrictModel:
    """Validate ``config`` (a model instance, a dict from YAML, or None for defaults) into ``cls.Config``."""
    if not (isinstance(cls, type) and issubclass(cls, Actor)):
        raise TypeError(f"expected an Actor subclass, got {cls!r}")
    schema = cls.Config
    if isinstance(config, schema):
        return config
    if isinstance(config, BaseModel):
        raise TypeError(
            f"{cls.__name__} expects a {schema.__name__} config, got a {type(config).__name__}"
        )
    return validate(schema, dict(config or {}))
