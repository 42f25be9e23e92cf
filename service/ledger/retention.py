"""Retention of ``ledger_hour``: drop whole months of hours, keep their rollups (``gpu-ledger prune``).

``prune(conn, before)`` removes every ``ledger_hour`` row before the month start ``before``: on a
partitioned PostgreSQL ledger by dropping the month partitions (no row-by-row delete, no bloat) and
deleting what the DEFAULT partition holds before it; elsewhere by one DELETE. ``ledger_day`` and the
group rollups are not touched: they keep the pruned history. The pruned days' columnar segments
(``ledger_hour_segment``, a copy of their hours) go too: reads already skip them, and a year of
them is disk the operator asked back.

What stays exact after pruning (docs/rollups.md): answers over whole UTC days (they read
``ledger_day`` or ``ledger_group_day``), and any window, mid-day edges and HOUR granularity
included, of an answer the group rollups serve (grouped and filtered by rollup dimensions only).
What does not: over pruned hours, device-level answers that read ``ledger_hour`` (HOUR granularity
or a window's partial-day edges grouped by DEVICE/NODE/WORKLOAD, the longest idle streak, idle at a
threshold other than the ledger's own) see no rows.

The boundary is recorded (``ledger_retention``) and :func:`check_writable` refuses to rebuild the
rollups of a pruned day: a late re-ingest or re-pricing of pruned hours would otherwise rebuild
those days from the few hours it wrote and lose the history the rollups kept.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import Connection, delete, select, text

from service.dbtypes import table_of
from service.ledger import partitions, version
from service.models import (
    DeviceTagDay,
    LedgerHour,
    LedgerHourSegment,
    LedgerRetention,
    WorkloadFact,
    WorkloadFactDay,
)
from service.timeutil import EPOCH, hour_index, month_index, month_start

RETENTION = table_of(LedgerRetention)
HOUR = table_of(LedgerHour)
SEGMENT = table_of(LedgerHourSegment)
WORKLOAD_FACT = table_of(WorkloadFact)
WORKLOAD_FACT_DAY = table_of(WorkloadFactDay)
DEVICE_TAG_DAY = table_of(DeviceTagDay)


class PrunedHistory(Exception):
    """A write would rebuild days whose hours were pruned."""


@dataclass(frozen=True)
class PruneResult:
    before: dt.datetime
    partitions_dropped: list[str]
    rows_deleted: int
    segments_deleted: int = 0
    workload_facts_deleted: int = 0


def pruned_before(conn: Connection) -> dt.datetime | None:
    """The instant before which ``ledger_hour`` was pruned, or None."""
    value: dt.datetime | None = conn.execute(
        select(RETENTION.c.hours_before).where(RETENTION.c.id == 1)
    ).scalar()
    return value


def first_kept_hour(conn: Connection) -> int | None:
    """The first hour index ``ledger_hour`` holds after a prune, or None where none ran."""
    before = pruned_before(conn)
    return None if before is None else hour_index(before)


def check_writable(conn: Connection, first_day: int) -> None:
    """Refuse to rebuild days from ``first_day`` on when some of them were pruned."""
    boundary = pruned_before(conn)
    if boundary is not None and EPOCH + dt.timedelta(days=first_day) < boundary:
        day = (EPOCH + dt.timedelta(days=first_day)).date()
        raise PrunedHistory(
            f"the ledger's hours before {boundary:%Y-%m} were pruned (gpu-ledger prune); "
            f"{day} cannot be rewritten: its rollups keep the history, which its hours no longer hold"
        )


def parse_month(value: str) -> dt.datetime:
    """``YYYY-MM`` → that month's first instant, UTC."""
    try:
        parsed = dt.datetime.strptime(value, "%Y-%m").replace(tzinfo=dt.UTC)
    except ValueError:
        raise ValueError(f"{value!r} is not a month: use YYYY-MM, e.g. 2025-01") from None
    return parsed


def boundary_keeping(days: int, now: dt.datetime) -> dt.datetime:
    """The month start to prune before so that at least the last ``days`` days before ``now`` keep
    their hours: the start of the month holding ``now - days`` (whole months only go)."""
    if days < 1:
        raise ValueError(f"keep at least one day of hours, not {days}")
    return month_start(month_index(now.astimezone(dt.UTC) - dt.timedelta(days=days)))


def prune(conn: Connection, before: dt.datetime, *, now: dt.datetime | None = None) -> PruneResult:
    """Drop every ``ledger_hour`` row before ``before`` (a month start, not after the current one)."""
    before = before.astimezone(dt.UTC)
    if before != month_start(month_index(before)):
        raise ValueError(f"{before.isoformat()} is not the start of a UTC month")
    current = month_start(month_index(now or dt.datetime.now(dt.UTC)))
    if before > current:
        raise ValueError(
            f"refusing to prune the current or a future month: {before:%Y-%m} is after {current:%Y-%m}"
        )
    dropped: list[str] = []
    deleted = 0
    if partitions.is_partitioned(conn):
        cutoff = month_index(before)
        for month, name in sorted(partitions.month_partitions(conn).items()):
            if month < cutoff:
                table = f'"{partitions.SCHEMA}"."{name}"'
                deleted += int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
                conn.execute(text(f"DROP TABLE {table}"))
                dropped.append(name)
    deleted += int(conn.execute(delete(HOUR).where(HOUR.c.hour_start < before)).rowcount or 0)
    first_kept_day = int((before - EPOCH).total_seconds()) // 86_400
    segments = int(conn.execute(delete(SEGMENT).where(SEGMENT.c.day_index < first_kept_day)).rowcount or 0)
    # Attribution facts last reported before the cutoff describe only hours before it (a report
    # comes with its hours, never before them): reattribute has nothing left to apply them to.
    facts = int(conn.execute(delete(WORKLOAD_FACT).where(WORKLOAD_FACT.c.updated_at < before)).rowcount or 0)
    # and the facts kept per day (workload_fact_day, device_tag_day) of the days pruned whole
    for by_day in (WORKLOAD_FACT_DAY, DEVICE_TAG_DAY):
        facts += int(conn.execute(delete(by_day).where(by_day.c.day_index < first_kept_day)).rowcount or 0)
    boundary = pruned_before(conn)
    if boundary is None:
        conn.execute(RETENTION.insert().values(id=1, hours_before=before))
    elif boundary < before:
        conn.execute(RETENTION.update().where(RETENTION.c.id == 1).values(hours_before=before))
    version.bump(conn)  # last: answers of windows cut mid-day before the cutoff change
    return PruneResult(before, dropped, deleted, segments, facts)
