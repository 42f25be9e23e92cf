"""Column types that keep the ledger's promises on every database: UTC-aware timestamps."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

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
