"""Errors the runtime raises at the caller, identical on every backend."""

from __future__ import annotations

__all__ = [
    "ActorCallError",
    "ActorDiedError",
    "NoHealthyReplicaError",
    "RuntimeStoppedError",
]


class ActorCallError(RuntimeError):
    """An endpoint raised: carries the actor, endpoint, rank and the remote traceback text.

    ``exc_type`` is the remote exception's qualified class name; ``remote_traceback`` is the
    formatted traceback from inside the actor (its process, on the monarch backend).
    """

    def __init__(self, actor: str, endpoint: str, rank: int, exc_type: str, message: str,
                 remote_traceback: str) -> None:
        self.actor = actor
        self.endpoint = endpoint
        self.rank = rank
        self.exc_type = exc_type
        self.message = message
        self.remote_traceback = remote_traceback
        super().__init__(
            f"{actor}.{endpoint} (rank {rank}) raised {exc_type}: {message}\n"
            f"--- remote traceback ---\n{remote_traceback.rstrip()}"
        )

    def __reduce__(self):  # keep all fields when pickled (e.g. re-raised across processes)
        return (type(self), (self.actor, self.endpoint, self.rank, self.exc_type, self.message,
                             self.remote_traceback))


class ActorDiedError(RuntimeError):
    """The actor (its process, on the monarch backend) is gone; the call was not answered."""

    def __init__(self, actor: str, endpoint: str, reason: str) -> None:
        self.actor = actor
        self.endpoint = endpoint
        self.reason = reason
        super().__init__(f"{actor}.{endpoint} was not answered: the actor died ({reason})")

    def __reduce__(self):
        return (type(self), (self.actor, self.endpoint, self.reason))


class NoHealthyReplicaError(RuntimeError):
    """A service has no live replica left and could not restart one in time."""


class RuntimeStoppedError(RuntimeError):
    """A call was made on a handle that has been stopped."""
