"""Column types that keep the ledger's promises on every database (UTC-aware timestamps), and the
typed handle on a SQLModel table class's Core table."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import DateTime, Table, inspect
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator
from sqlmodel import SQLModel

from service.timeutil import UTC, as_utc


class UTCDateTime(TypeDecorator[dt.datetime]):
    """``timestamptz`` on PostgreSQL; on SQLite a UTC text timestamp that comes back aware.

    Binding a naive datetime is refused: a naive value is a bug, not local time.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        value = as_utc(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = dt.datetime.fromisoformat(value)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def table_of(model: type[SQLModel]) -> Table:
    """The Core ``Table`` of a ``table=True`` model, for inserts and column lists.

    SQLModel sets ``__table__`` when the class is created but does not declare it, so type checkers
    cannot see it; the mapper's table is the same object, typed.
    """
    table = inspect(model).local_table
    if not isinstance(table, Table):
        raise TypeError(f"{model.__name__} is not mapped to one table")
    return table
