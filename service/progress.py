"""A rich progress bar fed by ``ingest_window``'s ``on_chunk`` callback."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from service.timeutil import HOUR_S


def _span_hours(args: tuple[Any, ...], kwargs: dict[str, Any]) -> float | None:
    """Hours covered by one chunk, from ``(start, end, …)`` or an object with start/end fields."""
    start, end = kwargs.get("start"), kwargs.get("end")
    if start is None and len(args) >= 2:
        start, end = args[0], args[1]
    if not isinstance(start, dt.datetime) and args:
        obj = args[0]
        start = getattr(obj, "start", getattr(obj, "window_start", None))
        end = getattr(obj, "end", getattr(obj, "window_end", None))
    if isinstance(start, dt.datetime) and isinstance(end, dt.datetime):
        return (end - start).total_seconds() / HOUR_S
    return None


class ChunkProgress:
    """``with ChunkProgress("ingest dc1") as p: p.set_window(a, b); ingest_window(..., on_chunk=p)``.

    Accepts ``on_chunk(chunk_start, chunk_end, ...)`` or ``on_chunk(chunk)`` where ``chunk`` has
    ``start``/``end`` (or ``window_start``/``window_end``); any other call counts as one step.
    Draws on stderr so stdout stays parseable.
    """

    def __init__(self, description: str, console: Console | None = None):
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("hours"),
            TimeElapsedColumn(),
            console=console or Console(file=sys.stderr),
            transient=False,
        )
        self.task = self.progress.add_task(description, total=None)

    def set_window(self, start: dt.datetime, end: dt.datetime) -> None:
        self.progress.update(self.task, total=(end - start).total_seconds() / HOUR_S, completed=0)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        hours = _span_hours(args, kwargs)
        self.progress.advance(self.task, hours if hours is not None else 1)

    def __enter__(self) -> ChunkProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
