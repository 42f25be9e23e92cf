"""The database: engines, schema migrations and sessions.

``make_engine`` is the one place that knows per-database connection settings; ``migrate`` runs
Alembic ``upgrade head`` programmatically, with the scripts of the installed ``migrations``
package, so it works from a wheel as well as from a checkout.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlmodel import Session

SQLITE_BUSY_TIMEOUT_MS = 30_000


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


def migrate(engine_or_url: Engine | str | URL, revision: str = "head") -> None:
    """Bring the schema up to ``revision`` (default: the newest). Safe to run on every start."""
    engine, owned = _as_engine(engine_or_url)
    try:
        with engine.begin() as connection:
            config = alembic_config(engine)
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        if owned:
            engine.dispose()


def downgrade(engine_or_url: Engine | str | URL, revision: str = "base") -> None:
    """Undo migrations down to ``revision`` (tests and operators rolling back)."""
    engine, owned = _as_engine(engine_or_url)
    try:
        with engine.begin() as connection:
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
