"""Whether the process of a RUNNING connector run is still alive: a lock it holds until the run ends.

A process that begins a run first takes a lock under a fresh random key (stored in
``connector_run.owner_lock``) that no other process can take while it holds it, and that is
released by the operating system or the database server when the process dies — killed, crashed,
its host gone:

* SQLite (a file): ``flock`` on ``<database>-runs/<key>.lock`` beside the database file. SQLite
  itself relies on file locks, so wherever it is safe (one host; containers sharing the volume
  included, whatever their host names and pid namespaces) the lock is exact.
* PostgreSQL: a session-level advisory lock held by a connection of the run's own, which the
  server drops with the session — also when the owner runs on another host.

Another process that finds the run RUNNING tries the lock: if it gets it, the owner is gone.
Nothing is guessed from host names, pids or clocks. An in-memory SQLite database has no other
process: no lock (``acquire`` gives None).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Protocol

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.pool import NullPool

#: First half of PostgreSQL's two-key advisory locks: GPU Ledger's runs ("GPLR").
PG_LOCK_NAMESPACE = 0x47504C52
#: How long after its host vanished a PostgreSQL run lock is dropped, about (see _acquire_pg).
KEEPALIVE_S = 120
_KEEPALIVE = {"tcp_keepalives_idle": "60", "tcp_keepalives_interval": "10", "tcp_keepalives_count": "6"}
_ATTEMPTS = 8  # fresh keys tried when one is taken (31-bit keys: a clash is already ~1e-9)


class RunLock(Protocol):
    """A held lock; ``release`` once the run's final status is committed."""

    key: int

    def release(self) -> None: ...


def _new_key() -> int:
    return secrets.randbelow(2**31 - 1) + 1  # fits connector_run.owner_lock (INTEGER) everywhere


def lock_dir(engine: Engine) -> Path | None:
    """Where a SQLite database's run locks live (None: in-memory, or not SQLite)."""
    url = engine.url
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    if url.database.startswith("file:"):  # URI filenames: no stable path to put locks beside
        return None
    return Path(f"{Path(url.database).resolve()}-runs")


class _FileLock:
    def __init__(self, path: Path, fd: int, key: int):
        self.path, self.fd, self.key = path, fd, key

    def release(self) -> None:
        # Unlinked first: a process that opens the path afterwards finds no file — a finished run.
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self.fd)  # closing the descriptor releases the flock


class _PgLock:
    def __init__(self, connection: Connection, key: int):
        self.connection, self.key = connection, key

    def release(self) -> None:
        # The session is closed (it never was in a pool): its lock goes with it, and no pooled
        # session can ever hold (and so re-take: advisory locks are re-entrant) a run's lock.
        with contextlib.suppress(Exception):
            self.connection.invalidate()
        self.connection.close()


def acquire(engine: Engine) -> RunLock | None:
    """Take a new run lock; None where no other process can share the database."""
    if engine.dialect.name == "postgresql":
        return _acquire_pg(engine)
    directory = lock_dir(engine)
    if directory is None:
        return None
    # Modes as the database's own files get (umask): another user running the CLI on the same
    # database must be able to lock and remove them, as with SQLite's -wal and -shm files.
    directory.mkdir(exist_ok=True)
    for _ in range(_ATTEMPTS):
        key = _new_key()
        path = directory / f"{key}.lock"
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a live run has this key
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        return _FileLock(path, fd, key)
    raise RuntimeError(f"no free run lock key in {directory} after {_ATTEMPTS} tries")


_lock_engines: dict[str, Engine] = {}
_lock_engines_guard = threading.Lock()


def _lock_engine(engine: Engine) -> Engine:
    """Connections for run locks come from an engine without a pool: a lock's session lives as
    long as its run and must not take a place in the pool the ingest itself draws from."""
    url = engine.url.render_as_string(hide_password=False)
    with _lock_engines_guard:
        if url not in _lock_engines:
            _lock_engines[url] = create_engine(engine.url, poolclass=NullPool)
        return _lock_engines[url]


def _acquire_pg(engine: Engine) -> RunLock:
    connection = _lock_engine(engine).connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        # A killed process's socket closes at once; a host that vanishes (power, network) closes
        # nothing: the server probes this session's TCP connection and drops it — and the lock —
        # within about KEEPALIVE_S instead of the operating system's default two hours.
        for name, value in _KEEPALIVE.items():
            connection.execute(text("SELECT set_config(:n, :v, false)"), {"n": name, "v": value})
        for _ in range(_ATTEMPTS):
            key = _new_key()
            got = connection.execute(
                text("SELECT pg_try_advisory_lock(:ns, :key)"), {"ns": PG_LOCK_NAMESPACE, "key": key}
            ).scalar_one()
            if got:
                return _PgLock(connection, key)
    except BaseException:
        connection.invalidate()
        connection.close()
        raise
    connection.invalidate()
    connection.close()
    raise RuntimeError(f"no free run lock key after {_ATTEMPTS} tries")


def owner_gone(engine: Engine, key: int) -> bool:
    """True when no process holds run lock ``key`` (it was released, or its holder died)."""
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            params = {"ns": PG_LOCK_NAMESPACE, "key": key}
            got = connection.execute(text("SELECT pg_try_advisory_lock(:ns, :key)"), params).scalar_one()
            if got:
                connection.execute(text("SELECT pg_advisory_unlock(:ns, :key)"), params)
            return bool(got)
    directory = lock_dir(engine)
    if directory is None:
        return True  # in-memory: no other process (the caller skips the runs it owns itself)
    path = directory / f"{key}.lock"
    try:
        fd = os.open(path, os.O_RDONLY)  # flock needs no write access
    except FileNotFoundError:
        return True  # its owner released it, after committing the run's end
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    # Held by no one: the owner died holding it. The file goes with the run.
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    os.close(fd)
    return True


def sweep(engine: Engine, running: Collection[int]) -> int:
    """Delete the lock files no process holds whose key no RUNNING run has (``running``): left by a
    process killed between taking its lock and writing its run. Held ones (a run about to be
    written) stay. SQLite only (PostgreSQL's locks leave nothing behind); the number deleted."""
    directory = lock_dir(engine)
    if directory is None or not directory.is_dir():
        return 0
    deleted = 0
    for path in directory.glob("*.lock"):
        if path.stem.isdigit() and int(path.stem) not in running and owner_gone(engine, int(path.stem)):
            deleted += 1
    return deleted
