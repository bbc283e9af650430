"""Errors of the eval service: the server's rejections (each with its HTTP status) and the client's."""

from __future__ import annotations

from typing import Any

__all__ = [
    "EvalRequestError",
    "EvalServiceUnavailable",
    "InvalidRequest",
    "QueueFull",
    "RequestConflict",
    "ServiceRejection",
    "TooLarge",
]


class ServiceRejection(Exception):
    """A request the server refuses; ``status`` is its HTTP status code."""

    status = 400

    def __init__(self, message: str, detail: Any = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.headers = headers or {}


class InvalidRequest(ServiceRejection):
    """A field has a bad value (422); the message names the field."""

    status = 422


class TooLarge(ServiceRejection):
    """Code or batch over the server's limits (413)."""

    status = 413


class RequestConflict(ServiceRejection):
    """A request id reused for a different payload (409)."""

    status = 409


class QueueFull(ServiceRejection):
    """Backpressure: the queue is full (429 with ``Retry-After``)."""

    status = 429

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message, {"retry_after_s": retry_after_s}, {"Retry-After": str(retry_after_s)})
        self.retry_after_s = retry_after_s


class EvalServiceUnavailable(RuntimeError):
    """The client could not get an answer from any of its servers."""

    def __init__(self, urls: list[str], errors: list[str]) -> None:
        tail = "; ".join(errors[-len(urls) * 2:]) if errors else "no attempt made"
        super().__init__(f"no eval server answered (tried {', '.join(urls)}): {tail}")
        self.urls = urls
        self.errors = errors


class EvalRequestError(RuntimeError):
    """A server rejected the request itself (4xx other than 429): retrying would not help."""

    def __init__(self, url: str, status: int, message: str, detail: Any = None) -> None:
        super().__init__(f"{url} rejected the request ({status}): {message}")
        self.url = url
        self.status = status
        self.message = message
        self.detail = detail
