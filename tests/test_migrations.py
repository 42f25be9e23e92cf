"""The migrations build exactly the schema the models describe, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from sqlmodel import SQLModel

import service.models  # noqa: F401
from migrations.support import compare_type
from service.db import current_revision, downgrade, head_revision, make_engine, migrate


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
