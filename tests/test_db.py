from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from service.db import local_settings, make_engine, normalize_url, session_scope
from service.models import ConnectorState


def test_postgres_urls_use_psycopg3() -> None:
    assert normalize_url("postgresql://u@h/d").drivername == "postgresql+psycopg"
    assert normalize_url("postgres://u@h/d").drivername == "postgresql+psycopg"


def test_sqlite_pragmas(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 30_000
    engine.dispose()


def test_session_scope_commits_and_rolls_back(engine: Engine) -> None:
    with session_scope(engine) as session:
        session.add(ConnectorState(name="a", type="t", status="OK"))
    with pytest.raises(RuntimeError), session_scope(engine) as session:
        session.add(ConnectorState(name="b", type="t", status="OK"))
        session.flush()
        raise RuntimeError
    with session_scope(engine) as session:
        assert session.get(ConnectorState, "a") is not None
        assert session.get(ConnectorState, "b") is None


def test_tables_are_empty_at_test_start(engine: Engine) -> None:
    # the previous test wrote connector_state rows; the engine fixture empties every table
    with session_scope(engine) as session:
        assert session.get(ConnectorState, "a") is None


@pytest.mark.postgres
def test_local_settings_hold_inside_and_go_back_after(pg_url: str) -> None:
    engine = make_engine(pg_url)
    show = "SELECT current_setting('enable_sort'), current_setting('constraint_exclusion')"
    try:
        with engine.connect() as conn:
            conn.execute(text("SET enable_sort = off"))  # the caller's own value, not the default
            with local_settings(conn, enable_sort="on", constraint_exclusion="on"):
                assert tuple(conn.execute(text(show)).one()) == ("on", "on")
            assert tuple(conn.execute(text(show)).one()) == ("off", "partition")
            conn.commit()
            assert tuple(conn.execute(text(show)).one()) == ("off", "partition")  # session value kept
    finally:
        engine.dispose()
