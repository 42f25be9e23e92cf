"""UTC time helpers. Every datetime in GPU Ledger is timezone-aware UTC."""

from __future__ import annotations

import datetime as dt

UTC = dt.UTC
HOUR_S = 3600
HOUR_MS = 3_600_000
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


def hour_index(value: dt.datetime) -> int:
    return to_ms(value) // HOUR_MS


def hour_start(index: int) -> dt.datetime:
    return EPOCH + dt.timedelta(hours=int(index))


def floor_hour(value: dt.datetime) -> dt.datetime:
    return hour_start(hour_index(value))


def ceil_hour(value: dt.datetime) -> dt.datetime:
    floored = floor_hour(value)
    return floored if floored == as_utc(value) else floored + dt.timedelta(hours=1)


def is_hour_aligned(value: dt.datetime) -> bool:
    return to_ms(value) % HOUR_MS == 0


def month_index(value: dt.datetime) -> int:
    """Months since 1970-01 (calendar months, UTC)."""
    value = as_utc(value)
    return (value.year - 1970) * 12 + value.month - 1


def month_start(index: int) -> dt.datetime:
    year, month0 = divmod(int(index), 12)
    return dt.datetime(1970 + year, month0 + 1, 1, tzinfo=UTC)
