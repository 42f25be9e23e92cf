"""The database: engines, schema migrations and sessions.

``make_engine`` is the one place that knows per-database connection settings; ``migrate`` runs
Alembic ``upgrade head`` programmatically, with the scripts of the installed ``migrations``
package, so it works from a wheel as well as from a checkout.

Migrations are atomic on every database: all the revisions one ``migrate`` applies, and Alembic's
version row, commit together or not at all (``migration_connection``), so a process killed at any
point leaves the schema it found, which the next ``migrate`` completes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlmodel import Session, SQLModel

SQLITE_BUSY_TIMEOUT_MS = 30_000
#: PostgreSQL advisory lock held by the migrating transaction ("GPLM").
MIGRATION_LOCK_KEY = 0x47504C4D

log = logging.getLogger(__name__)


class MigrationError(Exception):
    """The database is in a state ``migrate`` will not change on its own; the message says why
    and what to do."""


def normalize_url(url: str | URL) -> URL:
    """``postgresql://`` / ``postgres://`` mean psycopg 3 here (SQLAlchemy would pick psycopg2)."""
    parsed = make_url(url) if isinstance(url, str) else url
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def make_engine(url: str | URL, **kwargs: Any) -> Engine:
    """An engine for ``url`` with the settings GPU Ledger relies on.

    SQLite: usable from worker threads (the scheduler, Starlette's threadpool), WAL so readers
    don't block the ingesting writer, foreign keys enforced, and a busy timeout instead of
    immediate "database is locked" errors. PostgreSQL: psycopg 3, pre-ping so a restarted server
    doesn't fail the first request.
    """
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite":
        connect_args = {"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
        engine = create_engine(parsed, connect_args=connect_args, **kwargs)
        in_memory = parsed.database in (None, "", ":memory:")

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cursor = dbapi_conn.cursor()
            if not in_memory:  # WAL needs a file
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.close()

        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(parsed, **kwargs)


def alembic_config(engine: Engine | None = None) -> Config:
    """Alembic configuration without an ini file: scripts from the installed ``migrations`` package."""
    config = Config()
    config.set_main_option("script_location", str(resources.files("migrations")))
    if engine is not None:
        # ConfigParser interpolates '%': escape it so passwords with '%' survive.
        url = engine.url.render_as_string(hide_password=False).replace("%", "%%")
        config.set_main_option("sqlalchemy.url", url)
    return config


def _as_engine(engine_or_url: Engine | str | URL) -> tuple[Engine, bool]:
    if isinstance(engine_or_url, Engine):
        return engine_or_url, False
    return make_engine(engine_or_url), True


@contextmanager
def migration_connection(engine: Engine) -> Iterator[Connection]:
    """A connection inside one real transaction, committed when the block ends, rolled back when
    it raises (or never committed, when the process is killed).

    PostgreSQL's DDL is transactional: an ordinary transaction does. Python's ``sqlite3`` (legacy
    transaction control, the default through Python 3.15) emits ``BEGIN`` only before
    INSERT/UPDATE/DELETE, so every CREATE or ALTER TABLE would commit on its own and a kill in a
    migration would leave half a schema ("table billing_file already exists" ever after). For this
    one connection the driver's transaction control is switched off (``isolation_level = None``)
    and the transaction is begun explicitly — SQLAlchemy's documented recipe for transactional DDL
    with pysqlite ("Enabling Non-Legacy SQLite Transactional Modes"). ``BEGIN IMMEDIATE`` takes
    the write lock at once, so two processes migrating together queue up (busy timeout) instead
    of failing on a read lock that cannot be upgraded.
    """
    with engine.connect() as connection:
        if connection.dialect.name != "sqlite":
            with connection.begin():
                if connection.dialect.name == "postgresql":
                    # Replicas starting together migrate one after the other: the next one finds
                    # the schema at head instead of failing on "relation already exists".
                    lock = text("SELECT pg_advisory_xact_lock(:key)")
                    connection.execute(lock, {"key": MIGRATION_LOCK_KEY})
                yield connection
            return
        dbapi = connection.connection.dbapi_connection
        assert dbapi is not None
        legacy = dbapi.isolation_level
        # Nothing is open on a freshly checked-out connection: setting None commits nothing.
        dbapi.isolation_level = None
        try:
            connection.exec_driver_sql("BEGIN IMMEDIATE")  # SQLAlchemy's transaction autobegins with it
            try:
                yield connection
            except BaseException:
                connection.rollback()
                raise
            connection.commit()
        finally:
            # The connection goes back to the pool: as every other connection of the engine.
            dbapi.isolation_level = legacy


def migrate(engine_or_url: Engine | str | URL, revision: str = "head") -> None:
    """Bring the schema up to ``revision`` (default: the newest). Safe to run on every start.

    A database already there is only read (no write lock taken). Otherwise every missing revision
    is applied in ONE transaction (``migration_connection``). Tables left by an older GPU Ledger
    killed in its first migration are repaired first (``_clear_unfinished_first_migration``).
    """
    engine, owned = _as_engine(engine_or_url)
    try:
        if revision == "head" and current_revision(engine) == head_revision():
            return
        with migration_connection(engine) as connection:
            _clear_unfinished_first_migration(connection)
            config = alembic_config(engine)
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        if owned:
            engine.dispose()


def _clear_unfinished_first_migration(connection: Connection) -> None:
    """Drop what an interrupted first migration of an older GPU Ledger left: GPU Ledger's tables
    but no revision recorded, every one of them empty.

    Before migrations were atomic, a kill while creating the schema kept the tables created so far
    and no revision, so every later ``migrate`` failed with "table … already exists". Nothing
    writes to a database before its first migration completes, so empty tables hold nothing: they
    are dropped (in the migration's own transaction) and the schema is created whole. Tables with
    rows are not a half-made GPU Ledger database: ``MigrationError`` says so, and nothing changes.
    """
    if MigrationContext.configure(connection).get_current_revision() is not None:
        return
    import service.models  # noqa: F401  (every table on SQLModel.metadata)

    ours = set(SQLModel.metadata.tables) | {"alembic_version"}
    present = [
        name
        for name in inspect(connection).get_table_names()
        if name in ours or name.startswith("_alembic_tmp_")
    ]
    if not present:
        return
    quote = connection.dialect.identifier_preparer.quote
    with_rows = [
        name for name in present if connection.execute(text(f"SELECT 1 FROM {quote(name)} LIMIT 1")).first()
    ]
    url = connection.engine.url.render_as_string(hide_password=True)
    if with_rows:
        raise MigrationError(
            f"{url}: {len(present)} of GPU Ledger's tables exist but no schema revision is recorded, "
            f"and {', '.join(sorted(with_rows))} hold rows: this is not a database an interrupted "
            "`gpu-ledger migrate` left behind, so it is not changed. Point database_url at an empty "
            "database (or move this one aside) and run `gpu-ledger migrate` again."
        )
    for name in present:
        connection.execute(text(f"DROP TABLE {quote(name)}"))
    log.warning(
        "%s: dropped %d empty tables an interrupted first migration left (no revision recorded); "
        "creating the schema whole",
        url,
        len(present),
    )


def downgrade(engine_or_url: Engine | str | URL, revision: str = "base") -> None:
    """Undo migrations down to ``revision`` (tests and operators rolling back), in one transaction."""
    engine, owned = _as_engine(engine_or_url)
    try:
        with migration_connection(engine) as connection:
            config = alembic_config(engine)
            config.attributes["connection"] = connection
            command.downgrade(config, revision)
    finally:
        if owned:
            engine.dispose()


def head_revision() -> str | None:
    """The newest revision the installed migrations know of."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None: never migrated)."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that commits when the block ends and rolls back when it raises."""
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


@contextmanager
def local_settings(conn: Connection, **settings: str) -> Iterator[None]:
    """PostgreSQL ``settings`` (name = value) for the statements inside, then back to what they
    were. Each is set for the transaction (``set_config(…, true)``, ``SET LOCAL`` with bound
    values); a statement failing inside aborts the transaction, whose end puts them back (a
    statement to do so would fail too), so nothing is restored then."""
    names = list(settings)
    reads = ", ".join(f"current_setting(:n{i})" for i in range(len(names)))
    sets = ", ".join(f"set_config(:n{i}, :v{i}, true)" for i in range(len(names)))
    named = {f"n{i}": name for i, name in enumerate(names)}
    before = conn.execute(text(f"SELECT {reads}"), named).one()
    conn.execute(text(f"SELECT {sets}"), named | {f"v{i}": settings[n] for i, n in enumerate(names)})
    yield
    conn.execute(text(f"SELECT {sets}"), named | {f"v{i}": str(v) for i, v in enumerate(before)})


def driver_reason(exc: BaseException) -> str:
    """The first line of what the database driver said (SQLAlchemy wraps it as ``orig``): the
    reason an error line shows, without SQLAlchemy's statement dump."""
    return str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
