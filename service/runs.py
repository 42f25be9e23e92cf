"""Run bookkeeping shared by every ingestor (metrics windows, billing imports).

``begin_run`` marks the connector RUNNING and opens a ``connector_run`` row; ``finish_run`` closes
it with its status and counts and, only when given one, moves the connector's watermark — which
never goes backwards. Each is its own short transaction, so a crash mid-ingest leaves a RUNNING
run and an unmoved watermark behind: the next run starts from where the data is known to be in.

The process that begins a run holds its lock (``service.runlocks``) until ``finish_run`` has
committed, and records it with its host and pid. ``abort_orphaned_runs`` — at every start
(``migrate``, ``ingest``, ``serve``) and before each new run of a connector — closes the RUNNING
runs whose lock is free, i.e. whose process died (SIGKILL, OOM, power loss), as ``ABORTED``; a
run of a live process, here or (PostgreSQL) on another host, is never touched.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
from collections.abc import Mapping

from sqlalchemy import Engine, Executable, exists, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import Session, col

from connectors.base import ConnectorStatus
from service import runlocks
from service.ledger import version as ledger_version
from service.models import ConnectorRun, ConnectorState

log = logging.getLogger(__name__)

# The runs this process is running now — (database, run id) — and their locks (released by
# finish_run). Keyed by database too: a process may use several (tests do).
_held: dict[tuple[str, int], runlocks.RunLock | None] = {}
_held_guard = threading.Lock()


def _insert_state_if_absent(dialect: str, name: str, type_name: str) -> Executable:
    """``INSERT`` connector ``name``'s state row unless one exists (both databases' upsert)."""
    table = ConnectorState.__table__  # type: ignore[attr-defined]
    row = {"name": name, "type": type_name, "status": ""}
    if dialect == "postgresql":
        return pg_insert(table).values(row).on_conflict_do_nothing(index_elements=[table.c.name])
    if dialect == "sqlite":
        return sqlite_insert(table).values(row).on_conflict_do_nothing(index_elements=[table.c.name])
    raise NotImplementedError(f"begin_run: no INSERT … ON CONFLICT for {dialect}")


def begin_run(
    engine: Engine, name: str, type_name: str, start: dt.datetime, end: dt.datetime, now: dt.datetime
) -> int:
    """Open a run of connector ``name`` over ``[start, end)``; its id.

    Earlier runs of ``name`` left RUNNING by processes that are gone are closed first, so the
    connector's status never stays RUNNING for a dead run. The lock is taken before the row is
    written: no other process can ever see this run RUNNING with its lock free."""
    abort_orphaned_runs(engine, now, connector=name)
    lock = runlocks.acquire(engine)
    try:
        with Session(engine) as session:
            # Two processes beginning runs of a new connector at once: both would find no state row
            # and insert one; INSERT … ON CONFLICT DO NOTHING lets the second find the first's.
            session.execute(_insert_state_if_absent(session.get_bind().dialect.name, name, type_name))
            state = session.get(ConnectorState, name) or ConnectorState(name=name, type=type_name, status="")
            state.status = ConnectorStatus.RUNNING
            state.last_run_at = now
            session.add(state)
            run = ConnectorRun(
                connector=name,
                window_start=start,
                window_end=end,
                started_at=now,
                status=ConnectorStatus.RUNNING,
                owner_host=socket.gethostname()[:255],
                owner_pid=os.getpid(),
                owner_lock=lock.key if lock is not None else None,
            )
            session.add(run)
            ledger_version.bump_session(session)  # the `connectors` answer changes
            session.commit()
            assert run.id is not None
            run_id = run.id
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    with _held_guard:
        _held[(_db(engine), run_id)] = lock
    return run_id


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
    """Close run ``run_id``: status, counts (``read``/``accepted``/``rejected``/``rows``/``findings``), error;
    with ``watermark``, record a success and move the watermark forward to it."""
    try:
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
            run.read, run.accepted, run.rejected, run.ledger_rows, run.findings = (
                totals.get("read", 0),
                totals.get("accepted", 0),
                totals.get("rejected", 0),
                totals.get("rows", 0),
                totals.get("findings", 0),
            )
            session.add_all([state, run])
            ledger_version.bump_session(session)
            session.commit()
    finally:
        # Only now — until its end is committed, the run must look alive to every other process.
        # Also when that failed (the database went away): the run is over either way, and a
        # long-lived process (serve) must not keep it RUNNING until it exits; the next start or
        # the connector's next run closes it as ABORTED.
        with _held_guard:
            lock = _held.pop((_db(engine), run_id), None)
        if lock is not None:
            lock.release()


def _db(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def last_watermark(engine: Engine, name: str) -> dt.datetime | None:
    with Session(engine) as session:
        query = select(col(ConnectorState.watermark)).where(col(ConnectorState.name) == name)
        return session.execute(query).scalar()


def abort_orphaned_runs(
    engine: Engine, now: dt.datetime | None = None, *, connector: str | None = None
) -> list[ConnectorRun]:
    """Close as ``ABORTED`` the RUNNING runs (of ``connector``, or all) whose process is gone.

    Gone: its lock is free (``service.runlocks``); without a lock, its pid is gone from this host
    (a SQLite ``file:`` URI) or no owner was recorded (begun before migration 0003). Runs of this
    process are skipped.
    Each gets ``finished_at`` and an ``error`` saying what happened; a connector whose status is
    still RUNNING and that has no other RUNNING run becomes ``ABORTED`` with the same message.
    Nothing else changes: the watermark did not move, so the next run reads the window again.
    The aborted runs are returned (and logged).
    """
    now = now or dt.datetime.now(dt.UTC)
    with Session(engine) as session:
        query = select(ConnectorRun).where(col(ConnectorRun.status) == ConnectorStatus.RUNNING)
        if connector is not None:
            query = query.where(col(ConnectorRun.connector) == connector)
        running = list(session.execute(query).scalars())
    with _held_guard:
        mine = {run_id for db, run_id in _held if db == _db(engine)}
    gone = [r for r in running if r.id not in mine and _owner_gone(engine, r)]
    if connector is None:
        runlocks.sweep(engine, {r.owner_lock for r in running if r.owner_lock is not None})
    aborted = []
    for run in gone:
        error = _abort_message(run, now)
        with engine.begin() as conn:
            # Guarded by status: a run its owner finished meanwhile keeps its own end.
            closed = conn.execute(
                update(ConnectorRun)
                .where(col(ConnectorRun.id) == run.id, col(ConnectorRun.status) == ConnectorStatus.RUNNING)
                .values(status=ConnectorStatus.ABORTED, finished_at=now, error=error)
            ).rowcount
            if not closed:
                continue
            still_running = exists().where(
                col(ConnectorRun.connector) == run.connector,
                col(ConnectorRun.status) == ConnectorStatus.RUNNING,
            )
            conn.execute(
                update(ConnectorState)
                .where(
                    col(ConnectorState.name) == run.connector,
                    col(ConnectorState.status) == ConnectorStatus.RUNNING,
                    ~still_running,
                )
                .values(status=ConnectorStatus.ABORTED, last_error=error)
            )
            ledger_version.bump(conn)
        run.status, run.finished_at, run.error = ConnectorStatus.ABORTED, now, error
        aborted.append(run)
        log.warning("run %s of connector %s %s", run.id, run.connector, error)
    return aborted


def _owner_gone(engine: Engine, run: ConnectorRun) -> bool:
    if run.owner_lock is not None:
        return runlocks.owner_gone(engine, run.owner_lock)
    if run.owner_pid is not None and run.owner_host == socket.gethostname():
        # No lock could be taken (a SQLite "file:" URI): the pid, on this host — a reused pid
        # keeps a dead run RUNNING, never the other way round.
        try:
            os.kill(run.owner_pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # alive, another user's
        return False
    return True  # begun before migration 0003 (no owner recorded), or on another host without a lock


def _abort_message(run: ConnectorRun, now: dt.datetime) -> str:
    owner = (
        f"its process ({run.owner_host} pid {run.owner_pid})"
        if run.owner_pid is not None
        else "the process running it (not recorded: begun before migration 0003)"
    )
    return (
        f"aborted: {owner} ended without finishing it (killed or crashed, or its end could not be "
        f"written); found at "
        f"{now.astimezone(dt.UTC):%Y-%m-%dT%H:%M:%SZ} by {socket.gethostname()} pid {os.getpid()}. "
        "What it committed stays (whole days of a metrics window, whole billing periods); the "
        "watermark did not move, so the next run reads the window again."
    )
