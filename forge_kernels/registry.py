"""One way to name a pluggable thing in YAML: a registered name, or ``package.module:Name``.

:class:`Registry` holds one kind (losses, environments, reward functions); actor classes, which
are not registered, resolve by import path only (:func:`resolve_class`). Errors name the bad value,
what was expected and, for a near miss, what was probably meant::

    REWARDS: Registry[RewardFn] = Registry("reward")

    @REWARDS.register("kernelgym")
    def kernelgym(result, config): ...

    REWARDS.get("kernelgm")   # ValueError: unknown reward 'kernelgm' (did you mean 'kernelgym'?); registered: ...
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Registry", "import_object", "resolve_class"]

T = TypeVar("T")


def import_object(path: str, what: str) -> Any:
    """The object at ``"package.module:Name"``; ``what`` (e.g. ``"env.name"``) names the setting in errors."""
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"{what}={path!r}: expected 'package.module:Name'")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{what}={path!r}: cannot import {attr!r} from module {module!r} ({err})") from None


def resolve_class(path: str, what: str, base: type) -> type:
    """The subclass of ``base`` at import path ``path`` (an error naming ``what`` otherwise)."""
    cls = import_object(path, what)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"{what}={path!r} is {cls!r}, not a subclass of {base.__name__}")
    return cls


class Registry(Generic[T]):
    """Names -> objects of one kind, filled by a decorator, looked up by name or import path."""

    def __init__(self, kind: str, check: Callable[[Any], str | None] | None = None,
                 on_register: Callable[[str, Any], None] | None = None,
                 load_builtins: Callable[[], None] | None = None) -> None:
        """``check(obj)`` returns why ``obj`` may not be registered (None: fine); ``on_register``
        runs for each new entry; ``load_builtins`` imports the modules that register built-ins."""
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._check, self._on_register, self._load_builtins = check, on_register, load_builtins

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: make the decorated object selectable as ``name``."""

        def add(obj: T) -> T:
            problem = self._check(obj) if self._check is not None else None
            if problem is not None:
                raise TypeError(f"cannot register {self.kind} {name!r}: {problem}")
            existing = self._entries.get(name)
            if existing is not None and getattr(existing, "__qualname__", existing) != getattr(obj, "__qualname__", obj):
                raise ValueError(f"{self.kind} {name!r} is already registered (by {getattr(existing, '__qualname__', existing)})")
            if self._on_register is not None:
                self._on_register(name, obj)
            self._entries[name] = obj
            return obj

        return add

    def names(self) -> list[str]:
        """Registered names, sorted."""
        if self._load_builtins is not None:
            self._load_builtins()
        return sorted(self._entries)

    def get(self, name: str, what: str | None = None) -> T:
        """The entry for a registered ``name``, or the object at an import path ``package.module:Name``
        (checked like a registration); ``what`` names the setting in errors."""
        what = what or self.kind
        if ":" in name:
            obj = import_object(name, what)
            problem = self._check(obj) if self._check is not None else None
            if problem is not None:
                raise ValueError(f"{what}={name!r}: {problem}")
            return obj
        names = self.names()
        if name not in self._entries:
            close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown {self.kind} {name!r}{hint}; registered: {', '.join(names)} "
                             f"(or give 'package.module:Name')")
        return self._entries[name]

    def __contains__(self, name: str) -> bool:
        return name in self.names()
