"""What several alert tests do: connectors gone silent, evaluators started at the same moment."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ledger_rows import at

from service.models import ConnectorState

T = TypeVar("T")


def silent(put: Callable[[Iterable[Any]], None], *names: str) -> None:
    """Connectors ``names``, last heard from at ``at(0)``: a one-hour silence rule fires at ``at(2)``."""
    put(
        [ConnectorState(name=n, type="x", status="OK", last_success_at=at(0), watermark=at(0)) for n in names]
    )


def at_once(threads: int, work: Callable[[], T]) -> list[T]:
    """``work`` on ``threads`` threads released together (a barrier); its results, or the first error."""
    barrier = threading.Barrier(threads)
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            barrier.wait()
            results.append(work())
        except BaseException as exc:  # noqa: BLE001  (raised below, in the test's thread)
            errors.append(exc)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    if errors:
        raise errors[0]
    assert len(results) == threads, "an evaluator did not finish within 60 s"
    return results
