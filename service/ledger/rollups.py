"""The ledger's rollups: per device-day (``ledger_day``) and summed over devices per hour and per day
(``ledger_group_hour``, ``ledger_group_day``), rebuilt from ``ledger_hour`` in SQL.

Every rollup of a day is recomputed whole, in the transaction that rewrote any of the day's hours
(:func:`service.ledger.store.rebuild_days` calls :func:`rebuild` for every writer of
``ledger_hour``), so no rollup can disagree with the hours it sums. The group rollups are keyed by
the non-device dimensions answers are grouped and filtered by (:data:`GROUP_KEYS`) plus whether the
time was unallocated; money is summed exactly (NUMERIC on PostgreSQL, integer nanos on SQLite).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from typing import Any

from sqlalchemy import ColumnElement, Connection, Select, case, delete, func, insert, select, text

from service.db import local_settings
from service.dbtypes import table_of
from service.metrics_catalog import HIST_COLUMNS, UTIL_METRICS
from service.models import LedgerGroupDay, LedgerGroupHour, LedgerHour
from service.timeutil import EPOCH

#: Columns whose values add up over hours and devices.
SUMMED: tuple[str, ...] = (
    "present_s",
    "observed_s",
    "busy_s",
    "idle_s",
    *HIST_COLUMNS,
    *[f"{p}_s_{m.value}" for m in UTIL_METRICS for p in ("obs", "busy", "idle")],
    "energy_j",
    "cost",
    "idle_cost",
    "energy_cost",
)
#: Columns kept as the largest value of what they fold.
MAXED: tuple[str, ...] = ("mem_used_max_b", "mem_total_b", "temp_max_c")
#: The group rollups' keys besides time and ``unallocated``: every dimension of
#: :class:`service.analytics.dims.Dimension` except DEVICE, NODE and WORKLOAD (a pod or job name:
#: its cardinality follows the fleet's, so keying by it would copy the ledger rather than shrink
#: it), plus what answers label and weigh by (gpu_fraction, default_metric, currency, rate_source).
GROUP_KEYS: tuple[str, ...] = (
    "environment",
    "provider",
    "account",
    "region",
    "cluster",
    "instance_type",
    "gpu_model",
    "vendor",
    "gpu_fraction",
    "project",
    "team",
    "user_name",
    "namespace",
    "owner_rule",
    "default_metric",
    "currency",
    "rate_source",
)

HOUR = table_of(LedgerHour)
GROUP_HOUR = table_of(LedgerGroupHour)
GROUP_DAY = table_of(LedgerGroupDay)


def day_bounds(first_day: int, last_day: int) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) instants of days ``first_day``…``last_day``: a ``hour_start`` range, which lets
    PostgreSQL read only the monthly partitions of ``ledger_hour`` that hold those days."""
    return EPOCH + dt.timedelta(days=first_day), EPOCH + dt.timedelta(days=last_day + 1)


def hour_days(first_day: int, last_day: int) -> list[ColumnElement[bool]]:
    """WHERE terms of ``ledger_hour`` rows of days ``[first_day, last_day]`` (partition-prunable)."""
    lo, hi = day_bounds(first_day, last_day)
    return [
        HOUR.c.day_index >= first_day,
        HOUR.c.day_index <= last_day,
        # the same span as an hour_index range: what ix_ledger_hour_hour_index serves (a day of a
        # month's partition, not all of it)
        HOUR.c.hour_index >= first_day * 24,
        HOUR.c.hour_index < (last_day + 1) * 24,
        HOUR.c.hour_start >= lo,
        HOUR.c.hour_start < hi,
    ]


def _estimated(column: Any) -> ColumnElement[bool]:
    return func.max(case((column, 1), else_=0)) > 0


#: PostgreSQL ``work_mem`` for the rebuild's transaction: grouping a day of a large fleet by the
#: fifteen keys fits in memory as a hash table; at the default 4 MB it sorts wide rows on disk.
REBUILD_WORK_MEM = "64MB"


@contextlib.contextmanager
def hash_grouping(conn: Connection) -> Iterator[None]:
    """On PostgreSQL, the statements inside group by hashing, never by sorting (``enable_sort``
    off, then back to what it was), with ``work_mem`` at :data:`REBUILD_WORK_MEM` for the rest of
    the transaction.

    Why: hours just written (a new month's partition, a backfill) have no statistics yet, so the
    planner guesses a couple of rows and picks Sort + GroupAggregate — an external merge sort of
    the wide rows on disk. For the group rollups (few groups) that is 4× the hash plan's time (a
    week of 1,000 GPUs: 13.2 s vs 3.1 s); for ``ledger_day`` (a group per device-day) the hash
    aggregate outgrows its memory and spills to disk by partition, about as fast as the sort (a
    week of 5,000 GPUs, 1 M rows: 5.8–6.0 s vs 5.8 s). On an error nothing is restored: the
    transaction rolls back, and its ``SET LOCAL`` with it."""
    if conn.dialect.name != "postgresql":
        yield
        return
    conn.execute(text(f"SET LOCAL work_mem = '{REBUILD_WORK_MEM}'"))
    with local_settings(conn, enable_sort="off"):
        yield


def hourly_select(first_day: int, last_day: int) -> Select[Any]:
    """``ledger_group_hour``'s rows of days ``[first_day, last_day]``: ``ledger_hour`` grouped."""
    h = HOUR
    keys = [
        *[h.c[k] for k in GROUP_KEYS],
        (h.c.workload_key == "").label("unallocated"),
        h.c.hour_index,
        h.c.day_index,
        h.c.month_index,
    ]
    return (
        select(
            *keys,
            func.count().label("hour_rows"),
            *[func.sum(h.c[n]).label(n) for n in SUMMED],
            *[func.max(h.c[n]).label(n) for n in MAXED],
            _estimated(h.c.energy_estimated).label("energy_estimated"),
        )
        .where(*hour_days(first_day, last_day))
        .group_by(*keys)
    )


def rebuild(conn: Connection, first_day: int, last_day: int) -> None:
    """Recompute ``ledger_group_hour`` and ``ledger_group_day`` for days ``[first_day, last_day]``:
    one statement per table over the whole range, however many days it spans."""
    with hash_grouping(conn):
        _rebuild(conn, first_day, last_day)


def _rebuild(conn: Connection, first_day: int, last_day: int) -> None:
    conn.execute(  # by hour_index: the indexed column
        delete(GROUP_HOUR).where(
            GROUP_HOUR.c.hour_index >= first_day * 24, GROUP_HOUR.c.hour_index < (last_day + 1) * 24
        )
    )
    hourly = hourly_select(first_day, last_day)
    conn.execute(insert(GROUP_HOUR).from_select([c.name for c in hourly.selected_columns], hourly))

    conn.execute(
        delete(GROUP_DAY).where(GROUP_DAY.c.day_index >= first_day, GROUP_DAY.c.day_index <= last_day)
    )
    g = GROUP_HOUR
    day_keys = [*[g.c[k] for k in GROUP_KEYS], g.c.unallocated, g.c.day_index, g.c.month_index]
    daily = (
        select(
            *day_keys,
            func.sum(g.c.hour_rows).label("hour_rows"),
            *[func.sum(g.c[n]).label(n) for n in SUMMED],
            *[func.max(g.c[n]).label(n) for n in MAXED],
            _estimated(g.c.energy_estimated).label("energy_estimated"),
        )
        .where(g.c.hour_index >= first_day * 24, g.c.hour_index < (last_day + 1) * 24)
        .group_by(*day_keys)
    )
    conn.execute(insert(GROUP_DAY).from_select([c.name for c in daily.selected_columns], daily))
