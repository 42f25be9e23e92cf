"""The ledger version's bump: one more per committed writer, even when the row is missing and two
writers bump at once (the test suite empties every table, deleting the row migration 0005 made)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest
from sqlalchemy import Engine, text

from service.db import make_engine, migrate
from service.ledger import version


@pytest.fixture
def pg_engine(fresh_pg_database: Callable[[], AbstractContextManager[str]]) -> Iterator[Engine]:
    with fresh_pg_database() as url:
        migrate(url)
        engine = make_engine(url)
        try:
            yield engine
        finally:
            engine.dispose()


def _current(engine: Engine) -> int:
    with engine.connect() as conn:
        return version.current(conn)


@pytest.mark.postgres
def test_two_writers_bumping_a_missing_row_both_count(pg_engine: Engine) -> None:
    with pg_engine.begin() as conn:
        conn.execute(text("DELETE FROM ledger_version"))
    first_bumped, errors = threading.Event(), []

    def second() -> None:
        try:
            with pg_engine.begin() as conn:
                version.bump(conn)  # waits on the first writer's uncommitted row, then counts
        except Exception as exc:  # noqa: BLE001  (the test reports it)
            errors.append(exc)

    with pg_engine.begin() as conn:
        version.bump(conn)
        first_bumped.set()
        other = threading.Thread(target=second)
        other.start()
        time.sleep(0.3)  # the second writer is now queued on the row
    other.join(10)
    assert errors == []
    assert _current(pg_engine) == 2


def test_bump_counts_from_a_missing_row_on_sqlite(tmp_path: object) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}/v.db")
    try:
        migrate(str(engine.url))
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM ledger_version"))
        for _ in range(3):
            with engine.begin() as conn:
                version.bump(conn)
        with engine.begin() as conn:
            version.bump(conn)
            conn.rollback()
        assert _current(engine) == 3
    finally:
        engine.dispose()
