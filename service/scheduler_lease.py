"""The connectors' scheduler runs in exactly one process per database: the holder of a lock.

``serve --workers N`` starts N processes with the same app, and an operator may start ``serve``
twice (two hosts, a rolling restart); all of them answer queries, only one ingests. Each process
tries the database's scheduler lock when it starts and again every ``retry_s`` seconds; the one
that holds it runs the :class:`~service.scheduler.Scheduler`, and checks every ``check_s`` seconds
that it still does.

* PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``, namespace "GPLS") on a
  connection of its own, outside the pool, with TCP keepalives. The server releases it when the
  session ends — the process exits, is killed, or its host vanishes (about two minutes, as for
  run locks, :mod:`service.runlocks`) — and another process takes over at its next try.
* SQLite (a file): ``flock`` on ``<database>-scheduler.lock`` beside it, released by the kernel
  when the process dies. An in-memory database has no other process: no lock.

If the lock's session is lost while held (the database restarted), the holder stops its
scheduler at its next check and competes again; for at most ``check_s`` seconds two schedulers
may overlap, which ingest tolerates (a window is replaced whole, in one transaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.pool import NullPool

from service.logging import get_logger
from service.scheduler import Scheduler

log = get_logger(__name__)

#: First half of the two-key advisory lock ("GPLS"); runs use "GPLR", migrations a one-key lock.
PG_LOCK_NAMESPACE = 0x47504C53
PG_LOCK_KEY = 1
_KEEPALIVE = {"tcp_keepalives_idle": "60", "tcp_keepalives_interval": "10", "tcp_keepalives_count": "6"}


class HeldLock(Protocol):
    def alive(self) -> bool: ...

    def release(self) -> None: ...


class _PgLock:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def alive(self) -> bool:
        try:
            held = self.connection.execute(
                text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                    " AND pid = pg_backend_pid() AND classid = :ns AND objid = :key AND objsubid = 2"
                ),
                {"ns": PG_LOCK_NAMESPACE, "key": PG_LOCK_KEY},
            ).scalar_one()
        except Exception:  # noqa: BLE001  (a lost session holds nothing)
            return False
        return bool(held)

    def release(self) -> None:
        # Closing the session (never pooled) releases the lock with it.
        with contextlib.suppress(Exception):
            self.connection.invalidate()
        with contextlib.suppress(Exception):
            self.connection.close()


class _FileLock:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def alive(self) -> bool:
        return True  # the kernel keeps it while the descriptor is open

    def release(self) -> None:
        os.close(self.fd)


class _NoLock:
    def alive(self) -> bool:
        return True

    def release(self) -> None:
        pass


def lock_path(engine: Engine) -> Path | None:
    """The SQLite scheduler lock file (None: not a SQLite file)."""
    url = engine.url
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    if url.database.startswith("file:"):
        return None
    return Path(f"{Path(url.database).resolve()}-scheduler.lock")


def try_lock(engine: Engine) -> HeldLock | None:
    """The scheduler lock of ``engine``'s database if no other process holds it, else None."""
    if engine.dialect.name == "postgresql":
        lock_engine = create_engine(engine.url, poolclass=NullPool)
        connection = lock_engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            for name, value in _KEEPALIVE.items():
                connection.execute(text("SELECT set_config(:n, :v, false)"), {"n": name, "v": value})
            got = connection.execute(
                text("SELECT pg_try_advisory_lock(:ns, :key)"), {"ns": PG_LOCK_NAMESPACE, "key": PG_LOCK_KEY}
            ).scalar_one()
        except BaseException:
            connection.close()
            raise
        if got:
            return _PgLock(connection)
        connection.close()
        return None
    path = lock_path(engine)
    if path is None:
        return _NoLock()
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return _FileLock(fd)


class SchedulerLease:
    """Runs a scheduler from ``make_scheduler`` while this process holds the database's scheduler
    lock (see the module docstring). ``leader`` says whether it does now."""

    def __init__(
        self,
        engine: Engine,
        make_scheduler: Callable[[], Scheduler],
        *,
        retry_s: float = 15.0,
        check_s: float = 5.0,
    ) -> None:
        self.engine, self.make_scheduler = engine, make_scheduler
        self.retry_s, self.check_s = retry_s, check_s
        self.scheduler: Scheduler | None = None
        self._lock: HeldLock | None = None
        self._watch: asyncio.Task[None] | None = None

    @property
    def leader(self) -> bool:
        return self.scheduler is not None

    async def start(self) -> None:
        """Try the lock now (a lone ``serve`` schedules at once), then keep watching."""
        await self._try()
        self._watch = asyncio.create_task(self._watching(), name="scheduler-lease")

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        await self._step_down()

    async def _try(self) -> None:
        try:
            lock = await asyncio.to_thread(try_lock, self.engine)
        except Exception as exc:  # noqa: BLE001  (the database is away: try again later)
            log.warning("scheduler lock: cannot reach the database", error=f"{type(exc).__name__}: {exc}")
            return
        if lock is None:
            return
        self._lock = lock
        self.scheduler = self.make_scheduler()
        log.info("scheduler lock taken: this process runs the connectors", pid=os.getpid())
        try:
            await self.scheduler.start()
        except BaseException:
            await self._step_down()
            raise

    async def _step_down(self) -> None:
        scheduler, self.scheduler = self.scheduler, None
        lock, self._lock = self._lock, None
        try:
            if scheduler is not None:
                await scheduler.stop()
        finally:
            if lock is not None:
                lock.release()

    async def _watching(self) -> None:
        while True:
            await asyncio.sleep(self.check_s if self.leader else self.retry_s)
            try:
                if not self.leader:
                    await self._try()
                    continue
                assert self._lock is not None
                if not await asyncio.to_thread(self._lock.alive):
                    log.error(
                        "scheduler lock lost (database session gone): stopping this process's scheduler"
                    )
                    await self._step_down()
            except Exception:  # noqa: BLE001  (keep watching: the next round tries again)
                log.exception("scheduler lease: round failed")

    def collector(self) -> Collector:
        return _LeaseCollector(self)


class _LeaseCollector(Collector):
    def __init__(self, lease: SchedulerLease) -> None:
        self.lease = lease

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "gpu_ledger_scheduler_leader",
            "1 when this process holds the scheduler lock and runs the connectors, else 0.",
            value=1 if self.lease.leader else 0,
        )
