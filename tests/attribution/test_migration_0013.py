"""Migration 0013 on a ledger with rows, SQLite and PostgreSQL: rows their connector named get
owner_rule 'source' in the hours and every rollup, the segments are rebuilt with the column — also
from before segments existed (0009 leaves them to the migration adding the columns it lacks) and
from before the group rollups existed (0006 likewise)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from attribution_fleet import DAY0, HOURS, ingest, owners
from sqlalchemy import Engine, func, select

from service.db import downgrade, make_engine, migrate
from service.ledger import segments
from service.models import LedgerDay, LedgerGroupDay, LedgerGroupHour, LedgerHourSegment

END = DAY0 + dt.timedelta(hours=HOURS)


@contextmanager
def _sqlite(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'm.db'}"


def _check(url: str, back_to: str) -> None:
    migrate(url)
    engine = make_engine(url)
    try:
        ingest(engine, ())  # no rules: the connector named GPU-b's owner, nobody GPU-a's
        named = owners(engine)
        assert [r[-1] for r in named] == [None, None, "source", "source"]
        downgrade(engine, back_to)
        migrate(engine)
        assert owners(engine) == named
        for table in (LedgerDay, LedgerGroupHour, LedgerGroupDay):
            assert _cost_by_rule(engine, table) == {None: 4, "source": 4}, table
        with engine.connect() as conn:
            arrow = conn.execute(select(LedgerHourSegment.__table__.c.arrow)).scalar_one()  # type: ignore[attr-defined]
        segment = segments.decode(arrow, ["device_id", "owner_rule"]).with_columns(pl.all().cast(pl.String))
        assert segment.rows() == [("GPU-a", None), ("GPU-b", "source"), ("GPU-a", None), ("GPU-b", "source")]
    finally:
        engine.dispose()


def _cost_by_rule(engine: Engine, table: type) -> dict[object, Decimal]:
    t = table.__table__  # type: ignore[attr-defined]
    with engine.connect() as conn:
        rows = conn.execute(select(t.c.owner_rule, func.sum(t.c.cost)).group_by(t.c.owner_rule))
        return {k: Decimal(v) for k, v in rows}


@pytest.mark.parametrize("back_to", ["0012", "0008", "0005"])
def test_sqlite(tmp_path: Path, back_to: str) -> None:
    _check(f"sqlite:///{tmp_path / 'm.db'}", back_to)


@pytest.mark.postgres
@pytest.mark.parametrize("back_to", ["0012", "0008", "0005"])
def test_postgres(fresh_pg_database: Callable[[], AbstractContextManager[str]], back_to: str) -> None:
    with fresh_pg_database() as url:
        _check(url, back_to)
