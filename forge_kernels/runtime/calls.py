"""What both backends do around one endpoint call: copy arguments, run, describe failures."""

from __future__ import annotations

import copy
import traceback
from typing import Any

from forge_kernels.runtime.actor import Actor

__all__ = ["copy_value", "error_payload", "run_endpoint"]

_IMMUTABLE = (type(None), bool, int, float, complex, str, bytes, frozenset)


def copy_value(value: Any) -> Any:
    """A deep copy (tensors are cloned), so caller and actor never share mutable state."""
    if isinstance(value, _IMMUTABLE):
        return value
    if isinstance(value, tuple) and not value:
        return value
    if isinstance(value, dict) and not value:
        return {}
    return copy.deepcopy(value)


async def run_endpoint(actor: Actor, endpoint: str, args: tuple, kwargs: dict) -> Any:
    """Run ``actor.<endpoint>(*args, **kwargs)``; exceptions propagate to the backend."""
    return await getattr(actor, endpoint)(*args, **kwargs)


def error_payload(actor: Actor, endpoint: str, err: BaseException) -> tuple:
    """Picklable description of an endpoint failure: the args of :class:`ActorCallError`."""
    exc_type = type(err)
    name = exc_type.__qualname__
    if exc_type.__module__ not in ("builtins", "__main__"):
        name = f"{exc_type.__module__}.{name}"
    tb = "".join(traceback.format_exception(err))
    return (actor.name, endpoint, actor.rank, name, str(err), tb)
