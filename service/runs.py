"""Run bookkeeping shared by every ingestor (metrics windows, billing imports).

``begin_run`` marks the connector RUNNING and opens a ``connector_run`` row; ``finish_run`` closes
it with its status and counts and, only when given one, moves the connector's watermark — which
never goes backwards. Each is its own short transaction, so a crash mid-ingest leaves a RUNNING
run and an unmoved watermark behind: the next run starts from where the data is known to be in.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from sqlalchemy import Engine, select
from sqlmodel import Session

from connectors.base import ConnectorStatus
from service.models import ConnectorRun, ConnectorState


def begin_run(
    engine: Engine, name: str, type_name: str, start: dt.datetime, end: dt.datetime, now: dt.datetime
) -> int:
    """Open a run of connector ``name`` over ``[start, end)``; its id."""
    with Session(engine) as session:
        state = session.get(ConnectorState, name) or ConnectorState(name=name, type=type_name, status="")
        state.status = ConnectorStatus.RUNNING
        state.last_run_at = now
        session.add(state)
        run = ConnectorRun(
            connector=name, window_start=start, window_end=end, started_at=now, status="RUNNING"
        )
        session.add(run)
        session.commit()
        assert run.id is not None
        return run.id


def finish_run(
    engine: Engine,
    name: str,
    run_id: int,
    status: ConnectorStatus,
    totals: Mapping[str, int],
    now: dt.datetime,
    *,
    watermark: dt.datetime | None = None,
    error: str | None = None,
) -> None:
    """Close run ``run_id``: status, counts (``read``/``accepted``/``rejected``/``rows``), error;
    with ``watermark``, record a success and move the watermark forward to it."""
    with Session(engine) as session:
        state = session.get(ConnectorState, name)
        run = session.get(ConnectorRun, run_id)
        assert state is not None and run is not None
        state.status = status
        state.last_error = error
        if watermark is not None:
            state.last_success_at = now
            state.watermark = watermark if state.watermark is None else max(state.watermark, watermark)
        run.status, run.finished_at, run.error = status, now, error
        run.read, run.accepted, run.rejected, run.ledger_rows = (
            totals.get("read", 0),
            totals.get("accepted", 0),
            totals.get("rejected", 0),
            totals.get("rows", 0),
        )
        session.add_all([state, run])
        session.commit()


def last_watermark(engine: Engine, name: str) -> dt.datetime | None:
    with Session(engine) as session:
        return session.execute(select(ConnectorState.watermark).where(ConnectorState.name == name)).scalar()
