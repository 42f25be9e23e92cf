"""A cap on GraphQL operations executing at once: past it, a request waits briefly, then is
turned away (HTTP 503 with ``Retry-After``) instead of queueing until every client times out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

#: What a refused client is told to wait (seconds) before it tries again.
RETRY_AFTER_S = 1


class Overloaded(Exception):
    """Every slot stayed busy for the whole wait."""

    def __init__(self, slots: int) -> None:
        super().__init__(f"the service is running {slots} queries already: retry in {RETRY_AFTER_S} s")
        self.retry_after_s = RETRY_AFTER_S


class ConcurrencyGate:
    """``async with gate.slot(): ...`` holds one of ``slots`` (0: unlimited) for the block."""

    def __init__(self, slots: int, wait_s: float) -> None:
        self.slots, self.wait_s = slots, wait_s
        self._semaphore = anyio.Semaphore(slots) if slots > 0 else None

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self._semaphore is None:
            yield
            return
        acquired = False
        with anyio.move_on_after(self.wait_s):
            await self._semaphore.acquire()
            acquired = True  # no checkpoint between acquire and here: a slot is never lost
        if not acquired:
            raise Overloaded(self.slots)
        try:
            yield
        finally:
            self._semaphore.release()
