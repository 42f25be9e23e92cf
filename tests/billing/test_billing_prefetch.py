"""connectors.prefetch: a source read one item ahead in a thread — same items, same errors,
bounded read-ahead, the source closed in the reader thread when the consumer stops early."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from connectors.prefetch import Prefetched


class Source:
    """A generator-like source recording how far it was read and where it was closed."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at = n, fail_at
        self.read = 0
        self.closed_in: str | None = None
        self.gen = self._gen()

    def _gen(self) -> Iterator[int]:
        try:
            for i in range(self.n):
                if i == self.fail_at:
                    raise ValueError(f"bad item {i}")
                self.read = i + 1
                yield i
        finally:
            self.closed_in = threading.current_thread().name

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        return next(self.gen)

    def close(self) -> None:
        self.gen.close()


def _wait_until(predicate: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)


def test_items_in_order_and_the_end() -> None:
    source = Source(5)
    with Prefetched(source) as items:
        assert list(items) == [0, 1, 2, 3, 4]
        assert list(items) == []  # finished stays finished
    assert source.closed_in == "billing-reader"


def test_an_error_arrives_after_the_items_before_it() -> None:
    source = Source(5, fail_at=3)
    got: list[int] = []
    with Prefetched(source) as items, pytest.raises(ValueError, match="bad item 3"):
        for item in items:
            got.append(item)
    assert got == [0, 1, 2]


def test_read_ahead_is_bounded_while_the_consumer_holds_an_item() -> None:
    source = Source(100)
    with Prefetched(source, ahead=1) as items:
        assert next(items) == 0
        _wait_until(lambda: source.read >= 2)
        time.sleep(0.3)  # the reader would go on here if it were not held back
        assert source.read == 2  # the item held and one ahead
        assert next(items) == 1
        _wait_until(lambda: source.read >= 3)
        time.sleep(0.3)
        assert source.read == 3


def test_stopping_early_closes_the_source_in_the_reader_thread() -> None:
    source = Source(1000)
    items = Prefetched(source)
    assert next(items) == 0
    items.close()
    assert source.closed_in == "billing-reader"
    assert source.read <= 3
    with pytest.raises(StopIteration):
        next(items)
