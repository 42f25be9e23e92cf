"""One recorder for every ingest run (a metrics window, a billing import).

``with RunRecorder(...) as run:`` begins the run (``service.runs.begin_run``: the run's lock, a
``connector_run`` row, the connector RUNNING); the ingestor adds what it read to ``run.counts``
and ends a completed run with ``run.finish(status, watermark=...)``. An exception leaving the
block ends the run with the one classification of ``service.failures`` — its status and one-line
message in ``connector_run`` and ``connector_state``, the counts so far, the watermark unmoved —
and goes on to the caller, which classifies it the same way (the scheduler's next step, the
CLI's message). A bug (``INTERNAL_ERROR``) is logged here with its traceback.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from sqlalchemy import Engine

from connectors.sdk import ConnectorStatus
from service.failures import classify, log_traceback_once
from service.runs import begin_run, finish_run


@dataclass(slots=True)
class RunCounts:
    """What a run read, as ``connector_run`` keeps it: ``read == accepted + rejected`` always
    (``read`` is derived, so no outcome can break it); ``ledger_rows`` the rows written;
    ``findings`` the accepted rows that break a data-quality rule (billing)."""

    accepted: int = 0
    rejected: int = 0
    ledger_rows: int = 0
    findings: int = 0

    @property
    def read(self) -> int:
        return self.accepted + self.rejected

    def add(self, *, accepted: int = 0, rejected: int = 0, ledger_rows: int = 0, findings: int = 0) -> None:
        self.accepted += accepted
        self.rejected += rejected
        self.ledger_rows += ledger_rows
        self.findings += findings

    def totals(self) -> dict[str, int]:
        return {
            "read": self.read,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "rows": self.ledger_rows,
            "findings": self.findings,
        }


class RunRecorder:
    """Begins a run of connector ``name`` over ``[start, end)`` on entering; ends it exactly once:
    by ``finish`` or, when an exception leaves the block first, as that exception classifies."""

    def __init__(
        self,
        engine: Engine,
        name: str,
        type_name: str,
        start: dt.datetime,
        end: dt.datetime,
        clock: Callable[[], dt.datetime],
    ) -> None:
        self.engine, self.name, self.type_name = engine, name, type_name
        self.start, self.end, self.clock = start, end, clock
        self.counts = RunCounts()
        self.run_id = 0
        self.status: ConnectorStatus | None = None  # set when the run has ended

    def __enter__(self) -> RunRecorder:
        self.run_id = begin_run(self.engine, self.name, self.type_name, self.start, self.end, self.clock())
        return self

    def finish(
        self,
        status: ConnectorStatus,
        *,
        now: dt.datetime | None = None,
        watermark: dt.datetime | None = None,
        error: str | None = None,
    ) -> None:
        """End the run with ``status`` at ``now`` (default: the clock's now), moving the watermark
        forward to ``watermark`` if given."""
        if self.status is not None:
            raise RuntimeError(f"run {self.run_id} of {self.name} has already ended ({self.status})")
        now = now if now is not None else self.clock()
        self.status = status
        finish_run(
            self.engine,
            self.name,
            self.run_id,
            status,
            self.counts.totals(),
            now,
            watermark=watermark,
            error=error,
        )

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if error is None or self.status is not None:
            return
        if not isinstance(error, Exception):
            # KeyboardInterrupt, SystemExit: the run is not judged; its lock is released when the
            # process ends and the next start closes the run as ABORTED.
            return
        failure = classify(error)
        if failure.bug:
            log_traceback_once(error, f"run {self.run_id} of connector {self.name}")
        self.finish(failure.status, error=failure.message)
