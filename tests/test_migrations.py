"""The migrations build exactly the schema the models describe, on SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import OperationalError
from sqlmodel import SQLModel

import service.models  # noqa: F401
from migrations.support import compare_type
from service.db import MigrationError, current_revision, downgrade, head_revision, make_engine, migrate


def _diff(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": compare_type})
            return compare_metadata(context, SQLModel.metadata)
    finally:
        engine.dispose()


def _round_trip(url: str) -> None:
    migrate(url)
    engine = make_engine(url)
    try:
        assert current_revision(engine) == head_revision()
        tables = set(inspect(engine).get_table_names())
        assert set(SQLModel.metadata.tables) <= tables
        assert _diff(url) == [], "models and migrations differ: run scripts/new-migration"
        downgrade(engine, "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        assert current_revision(engine) is None
        migrate(engine)  # and up again: downgrade left nothing behind that blocks it
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()


def test_head_exists() -> None:
    assert head_revision() is not None


def test_sqlite_upgrade_matches_models_and_downgrades(tmp_path: Path) -> None:
    _round_trip(f"sqlite:///{tmp_path / 'm.db'}")


@pytest.mark.postgres
def test_postgres_upgrade_matches_models_and_downgrades(
    fresh_pg_database: Callable[[], AbstractContextManager[str]],
) -> None:
    with fresh_pg_database() as url:
        _round_trip(url)


def test_migrate_is_idempotent(sqlite_url: str) -> None:
    migrate(sqlite_url)  # already at head: a no-op
    engine = make_engine(sqlite_url)
    try:
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()


def _half_made_by_an_old_version(url: str, rows: bool = False) -> None:
    """What a kill left in the first migration before migrations were atomic on SQLite: some of the
    schema's tables, an empty alembic_version, no revision."""
    engine = make_engine(url)
    try:
        tables = [SQLModel.metadata.tables[n] for n in ("billing_file", "billing_line", "connector_run")]
        SQLModel.metadata.create_all(engine, tables=tables)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
            if rows:
                conn.execute(
                    text(
                        "INSERT INTO billing_file (source, source_file, rows_read, rows_accepted,"
                        " rows_refused, rows_skipped, imported_at) VALUES ('cur', 'a.csv', 0, 0, 0, 0,"
                        " '2025-09-01 00:00:00')"
                    )
                )
    finally:
        engine.dispose()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_migrate_completes_a_first_migration_an_old_version_left_half_done(
    kind: str, tmp_path: Path, fresh_pg_database: Callable[[], AbstractContextManager[str]]
) -> None:
    with fresh_pg_database() if kind == "postgres" else nullcontext(f"sqlite:///{tmp_path / 'h.db'}") as url:
        _half_made_by_an_old_version(url)
        migrate(url)
        engine = make_engine(url)
        try:
            assert current_revision(engine) == head_revision()
        finally:
            engine.dispose()
        assert _diff(url) == []


def test_migrate_refuses_tables_with_rows_and_no_revision(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    _half_made_by_an_old_version(url, rows=True)
    with pytest.raises(MigrationError) as caught:
        migrate(url)
    assert str(caught.value) == (
        f"{url}: 4 of GPU Ledger's tables exist but no schema revision is recorded, and billing_file "
        "hold rows: this is not a database an interrupted `gpu-ledger migrate` left behind, so it is "
        "not changed. Point database_url at an empty database (or move this one aside) and run "
        "`gpu-ledger migrate` again."
    )
    engine = make_engine(url)
    try:  # nothing changed: the refusal rolled back
        assert set(inspect(engine).get_table_names()) == {
            "alembic_version",
            "billing_file",
            "billing_line",
            "connector_run",
        }
    finally:
        engine.dispose()


def test_a_failing_revision_leaves_the_schema_it_found(tmp_path: Path) -> None:
    """Every revision one migrate applies commits together, on SQLite too: 0003 failing (its column
    is there already) takes 0002's table and columns back with it."""
    url = f"sqlite:///{tmp_path / 'f.db'}"
    migrate(url, "0001")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE connector_run ADD COLUMN owner_pid INTEGER"))
        before = _schema(engine)
        with pytest.raises(OperationalError, match="duplicate column name: owner_pid"):
            migrate(engine)
        assert _schema(engine) == before
        assert current_revision(engine) == "0001"
        assert "api_token" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def _schema(engine: Engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        return sorted(conn.execute(text("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")).all())


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_processes_migrating_together_all_succeed(
    kind: str, tmp_path: Path, fresh_pg_database: Callable[[], AbstractContextManager[str]]
) -> None:
    """Replicas starting at once on a fresh database: one migrates, the others wait for it and
    find the schema at head (without the lock: "relation billing_file already exists")."""
    with fresh_pg_database() if kind == "postgres" else nullcontext(f"sqlite:///{tmp_path / 'c.db'}") as url:
        code = "import sys; from service.db import migrate; migrate(sys.argv[1])"
        procs = [
            subprocess.Popen([sys.executable, "-c", code, url], stderr=subprocess.PIPE, text=True)
            for _ in range(3)
        ]
        errors = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], errors
        engine = make_engine(url)
        try:
            assert current_revision(engine) == head_revision()
        finally:
            engine.dispose()


def test_migrate_leaves_pooled_connections_as_the_engine_makes_them(tmp_path: Path) -> None:
    """The migration's connection had the driver's transaction control switched off: it goes back
    to the pool as every other connection is (legacy control, WAL, foreign keys, busy timeout)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'p.db'}", pool_size=1, max_overflow=0)
    try:
        migrate(engine)
        with engine.connect() as conn:  # the one pooled connection: the migration's
            assert conn.connection.dbapi_connection.isolation_level == ""  # type: ignore[union-attr]
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
            assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 30_000
            assert conn.execute(text("SELECT count(*) FROM connector_run")).scalar() == 0
    finally:
        engine.dispose()
