"""UTC time helpers a connector needs. Every datetime in GPU Ledger is timezone-aware UTC."""

from __future__ import annotations

import datetime as dt

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


def as_utc(value: dt.datetime) -> dt.datetime:
    """The same instant in UTC; a naive datetime is an error, never silently local time."""
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value.isoformat()} has no timezone; give UTC (…Z)")
    return value.astimezone(UTC)


def parse_utc(text: str) -> dt.datetime:
    """ISO 8601 with an explicit offset or Z; a bare date means midnight UTC."""
    text = text.strip()
    if len(text) == 10:
        return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)
    value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return as_utc(value)


def to_ms(value: dt.datetime) -> int:
    delta = as_utc(value) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_ms(ms: int) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=int(ms))
