"""A billing source read one batch ahead, in a thread of its own.

An import alternates two kinds of work: parsing the export (Polars, in this process) and storing
what was parsed (``COPY``, then PostgreSQL's own CPU inserting rows and updating indexes, or
SQLite's B-trees). One after the other, each waits for the other; with the next batch parsed while
the current one is stored, a 2-core machine keeps both cores busy. Polars and the database drivers
release the GIL while they work, so the two threads do run at once.

Memory stays bounded: the reader parses the next batch only once the consumer has finished with
the one before the batch it holds (``ahead`` batches at most beyond the current one). The
source's iterator runs — and is closed — in the reader thread only; what it yields, and what it
raises, reaches the consumer in order, so an error ends the import exactly where it would have
without the thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
_POLL_S = 0.1


class Prefetched(Generic[T]):
    """Iterate ``source`` in a reader thread, ``ahead`` items ahead; :meth:`close` when done (also
    when the consumer stops early: the reader stops after the item it is reading and closes
    ``source``)."""

    def __init__(self, source: Iterator[T], *, ahead: int = 1, name: str = "billing-reader") -> None:
        self._items: queue.SimpleQueue[tuple[str, object]] = queue.SimpleQueue()
        self._room = threading.Semaphore(ahead + 1)  # the consumer's current item holds one
        self._stop = threading.Event()
        self._holding = False
        self._finished = False
        self._thread = threading.Thread(target=self._read, args=(source,), name=name, daemon=True)
        self._thread.start()

    def _read(self, source: Iterator[T]) -> None:
        try:
            while self._wait_for_room():
                try:
                    item = next(source)
                except StopIteration:
                    self._items.put(("end", None))
                    return
                except BaseException as error:  # noqa: BLE001  (re-raised in the consumer's thread)
                    self._items.put(("error", error))
                    return
                self._items.put(("item", item))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001  (the consumer's outcome is the one that counts)
                    log.warning("billing: closing the source's reader failed", exc_info=True)

    def _wait_for_room(self) -> bool:
        while not self._stop.is_set():
            if self._room.acquire(timeout=_POLL_S):
                return not self._stop.is_set()
        return False

    def __iter__(self) -> Prefetched[T]:
        return self

    def __next__(self) -> T:
        if self._finished:
            raise StopIteration
        if self._holding:  # the consumer is done with the previous item: the reader may go on
            self._holding = False
            self._room.release()
        kind, value = self._items.get()
        if kind == "item":
            self._holding = True
            return value  # type: ignore[return-value]
        self._finished = True
        if kind == "error":
            assert isinstance(value, BaseException)
            raise value
        raise StopIteration

    def close(self) -> None:
        """Stop the reader (after the item it is reading) and wait for it to close the source."""
        self._stop.set()
        self._thread.join()
        self._finished = True

    def __enter__(self) -> Prefetched[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
