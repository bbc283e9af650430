"""The version gate: requests share it, a weight update owns it, so no sequence mixes versions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["VersionGate"]


class VersionGate:
    """A readers-writer gate with writer priority: requests share it, a weight update owns it.

    Once a writer is waiting, new readers wait too (the update is not starved) and the writer
    enters only when every reader already inside has left.
    """

    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self._readers = 0
        self._writer_waiting = 0
        self._writing = False

    @property
    def in_flight(self) -> int:
        return self._readers

    @asynccontextmanager
    async def request(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._writing and not self._writer_waiting)
            self._readers += 1
        try:
            yield
        finally:
            async with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @asynccontextmanager
    async def update(self) -> AsyncIterator[None]:
        async with self._cond:
            self._writer_waiting += 1
            try:
                await self._cond.wait_for(lambda: not self._writing and self._readers == 0)
            finally:
                self._writer_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            async with self._cond:
                self._writing = False
                self._cond.notify_all()
