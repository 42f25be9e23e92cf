"""The ledger's hour and month arithmetic on UTC times. Every datetime in GPU Ledger is
timezone-aware UTC; the basic helpers (``as_utc``, ``to_ms``…) are the connector SDK's and are
re-exported here for the service's imports.
"""

from __future__ import annotations

import datetime as dt

from connectors.sdk.timeutil import EPOCH as EPOCH
from connectors.sdk.timeutil import UTC as UTC
from connectors.sdk.timeutil import as_utc as as_utc
from connectors.sdk.timeutil import from_ms as from_ms
from connectors.sdk.timeutil import parse_utc as parse_utc
from connectors.sdk.timeutil import to_ms as to_ms

HOUR_S = 3600
HOUR_MS = 3_600_000


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
