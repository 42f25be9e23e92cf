"""Shared fixtures: databases built once per session, emptied between tests.

* ``sqlite_url`` — a fresh, migrated SQLite file per test (copied from a session template).
* ``pg_url`` — a migrated PostgreSQL database ``gpu_ledger_test_<xdist worker>_<random>`` for the
  session (one per worker), dropped at the end; a test asking for it is marked ``postgres``.
  Skipped when the server is unreachable, unless ``GPU_LEDGER_REQUIRE_POSTGRES=1`` (``.ci/run``
  sets it): then unreachable is a failure.
* ``db_url`` — parametrized over both (the PostgreSQL case carries the ``postgres`` marker); every
  table is emptied before the test.
* ``engine`` — ``make_engine(db_url)``, disposed after the test.
* ``fresh_pg_database`` — a context-manager factory for tests that need an empty database of their
  own (migration tests).

The server is ``GPU_LEDGER_TEST_PG_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from importlib import resources
from pathlib import Path

import anyio
import pytest
from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import make_url
from sqlmodel import SQLModel

import service.models  # noqa: F401  (registers every table on SQLModel.metadata)
from service.db import make_engine, migrate

# anyio imports its submodules on first use, and pytest rewrites anyio's modules as it imports them
# (anyio is a pytest plugin) with ast.parse. A live server's thread importing one (anyio.open_file,
# for a static file) while another thread parsed raced CPython 3.11's AST recursion counter
# ("SystemError: AST constructor recursion depth mismatch"): a response cut after its headers, in
# CI. Import them all now, on the main thread, before any server starts.
for _name in dir(anyio):
    getattr(anyio, _name)

# The moto server fixtures (moto, aws_client…) for every test that asks for them.
pytest_plugins = ["awsfake.fixtures"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for ``pg_url`` needs the server: mark it ``postgres`` here, not by hand.

    (``db_url``'s PostgreSQL case carries the marker on its param; ``fresh_pg_database`` refuses
    an unmarked test.)
    """
    for item in items:
        if "pg_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.postgres)


PG_ADMIN_URL = os.environ.get(
    "GPU_LEDGER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REQUIRE_PG = os.environ.get("GPU_LEDGER_REQUIRE_POSTGRES", "") not in ("", "0", "false")
PG_CONNECT_TIMEOUT_S = 5


def _have_migrations() -> bool:
    versions = resources.files("migrations") / "versions"
    return any(p.name.endswith(".py") and not p.name.startswith("_") for p in versions.iterdir())


def build_schema(url: str) -> None:
    """Migrate ``url`` to head; before the first revision exists, fall back to ``create_all``."""
    if _have_migrations():
        migrate(url)
        return
    engine = make_engine(url)
    try:
        SQLModel.metadata.create_all(engine)
    finally:
        engine.dispose()


def empty_tables(engine: Engine) -> None:
    """Delete every row of every table except Alembic's bookkeeping."""
    with engine.begin() as conn:
        names = [n for n in inspect(conn).get_table_names() if n != "alembic_version"]
        if not names:
            return
        if engine.dialect.name == "postgresql":
            quoted = ", ".join(f'"{n}"' for n in names)
            conn.execute(text(f"TRUNCATE {quoted} RESTART IDENTITY CASCADE"))
        else:
            for name in names:
                conn.execute(text(f'DELETE FROM "{name}"'))


# --- SQLite ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    build_schema(f"sqlite:///{path}")
    # Fold the WAL into the main file so a plain file copy is a complete database.
    engine = make_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    engine.dispose()
    return path


@pytest.fixture
def sqlite_url(_sqlite_template: Path, tmp_path: Path) -> str:
    """A fresh, migrated SQLite database file of this test's own."""
    path = tmp_path / "ledger.db"
    shutil.copyfile(_sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(scope="session")
def _sqlite_session_url(_sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("sqlite-session") / "ledger.db"
    shutil.copyfile(_sqlite_template, path)
    return f"sqlite:///{path}"


# --- PostgreSQL -----------------------------------------------------------------------------------


def _pg_unavailable(reason: str) -> None:
    if REQUIRE_PG:
        pytest.fail(f"PostgreSQL required (GPU_LEDGER_REQUIRE_POSTGRES) but {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL not reachable at {make_url(PG_ADMIN_URL).render_as_string()}: {reason}")


def _database_name(prefix: str) -> str:
    """A name no other session or xdist worker uses (the worker id only makes it legible)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return f"{prefix}_{worker}_{uuid.uuid4().hex[:12]}"


@contextmanager
def _fresh_pg_database(prefix: str = "gpu_ledger_test") -> Iterator[str]:
    admin = make_engine(
        PG_ADMIN_URL,
        isolation_level="AUTOCOMMIT",
        pool_pre_ping=False,
        connect_args={"connect_timeout": PG_CONNECT_TIMEOUT_S},  # a silent host is "no server" too
    )
    name = _database_name(prefix)
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # noqa: BLE001  (any connection failure means "no server")
        admin.dispose()
        # Raised outside the try/finally below: nothing was created, so no clean-up runs (it would
        # reconnect, fail again and replace this skip with an error).
        _pg_unavailable(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    try:
        yield make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        try:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        finally:
            admin.dispose()


@pytest.fixture
def fresh_pg_database(request: pytest.FixtureRequest) -> Callable[[], AbstractContextManager[str]]:
    """``with fresh_pg_database() as url:`` an empty database, dropped afterwards.

    Only for tests marked ``postgres``, so that ``-m "not postgres"`` never needs the server.
    """

    def fresh() -> AbstractContextManager[str]:
        if request.node.get_closest_marker("postgres") is None:
            pytest.fail(f"{request.node.nodeid} uses PostgreSQL without the postgres marker", pytrace=False)
        return _fresh_pg_database()

    return fresh


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A migrated PostgreSQL database for this test session."""
    with _fresh_pg_database() as url:
        build_schema(url)
        yield url


# --- both -----------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """A migrated database of each kind, emptied before the test."""
    fixture = "_sqlite_session_url" if request.param == "sqlite" else "pg_url"
    url: str = request.getfixturevalue(fixture)
    engine = make_engine(url)
    try:
        empty_tables(engine)
    finally:
        engine.dispose()
    return url


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An engine on ``db_url`` (tables empty at the start of the test)."""
    eng = make_engine(db_url)
    yield eng
    eng.dispose()
