"""Writing the ledger: replace a window's hourly rows, rebuild the rollups, upsert devices.

Idempotency is by window (docs/design.md §3.5): re-ingesting ``[start, end)`` deletes that window's rows
of the source and of every device in the batch, then inserts the new rows, in one transaction.
Every rollup of every day the window touches (``ledger_day`` and the group rollups of
:mod:`service.ledger.rollups`) is rebuilt from ``ledger_hour`` in SQL in the same transaction, so
late data that rewrites an hour can never leave a stale daily or dashboard figure behind.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

import polars as pl
from sqlalchemy import Connection, Executable, Table, case, delete, func, insert, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from connectors.base import DeviceInfo
from connectors.sdk.shapes import ATTRIBUTED, DEVICE, WORKLOAD, names
from service.dbtypes import table_of
from service.ledger import bulk, partitions, retention, rollups, segments
from service.models import Device, LedgerDay, LedgerHour
from service.money import from_nanos
from service.timeutil import from_ms, hour_start

_SUMMED = rollups.SUMMED
_MAXED = rollups.MAXED
# Constant within a (device, day, workload, currency) group, so the rollup keeps any one (max):
# the described attributes every ledger row carries, less the group's own keys, and the ingest's.
_DIMENSIONS = (
    "source",
    *[
        a.name
        for a in (*DEVICE, *WORKLOAD, *ATTRIBUTED)
        if a.ledger and a.name not in ("device_id", "workload_key")
    ],
    "default_metric",
    "rate_source",
)
_MONEY = {"cost_nanos": "cost", "idle_cost_nanos": "idle_cost", "energy_cost_nanos": "energy_cost"}
_HOUR_COLUMNS = {c.name for c in table_of(LedgerHour).columns} - {"id"}


def replace_hours(
    conn: Connection,
    source: str,
    start_hour: int,
    end_hour: int,
    device_ids: Sequence[str],
    rows: pl.DataFrame,
) -> int:
    """Replace ledger hours ``[start_hour, end_hour)`` of ``source`` and of ``device_ids`` by ``rows``.

    The rows are written column-wise (:mod:`service.ledger.bulk`): ``COPY`` on PostgreSQL, one
    ``executemany`` of tuples on SQLite, each value in the form its column type would bind (money
    as exact nanos on SQLite, exact 9-place decimal text into ``NUMERIC`` on PostgreSQL; times as
    UTC), so the stored rows are the ones ``insert(ledger_hour)`` of Python values would store.
    """
    table = table_of(LedgerHour)
    scope = (
        or_(table.c.source == source, table.c.device_id.in_(list(device_ids)))
        if device_ids
        else (table.c.source == source)
    )
    hours = [
        table.c.hour_index >= start_hour,
        table.c.hour_index < end_hour,
        # the same range on the partition key, so PostgreSQL touches only the window's months
        table.c.hour_start >= hour_start(start_hour),
        table.c.hour_start < hour_start(end_hour),
    ]
    conn.execute(delete(table).where(*hours, scope))
    if rows.is_empty():
        return 0
    dialect = conn.dialect.name
    if dialect == "postgresql":
        hours_written = rows["hour_index"]
        partitions.ensure_months(conn, int(hours_written.min()), int(hours_written.max()))  # type: ignore[arg-type]
    if dialect == "postgresql":
        bulk.copy_csv(conn, table.name, _bound(rows, dialect))
    elif dialect == "sqlite":
        bulk.insert_tuples(conn, table.name, _bound(rows, dialect))
    else:
        conn.execute(insert(table), _records(rows))
    return rows.height


def _hour_frame(rows: pl.DataFrame) -> pl.DataFrame:
    """Only ``ledger_hour`` columns, money renamed from ``*_nanos``; a column the frame lacks gets
    its column default (what ``insert(...)`` would have filled in), else null."""
    frame = rows.rename({k: v for k, v in _MONEY.items() if k in rows.columns})
    keep = [c for c in frame.columns if c in _HOUR_COLUMNS]
    missing = []
    for column in table_of(LedgerHour).columns:
        if column.name == "id" or column.name in keep:
            continue
        default = column.default
        scalar = default is not None and getattr(default, "is_scalar", False)
        value = getattr(default, "arg", None) if scalar else None
        missing.append(pl.lit(value).alias(column.name))
    return frame.select(keep).with_columns(missing) if missing else frame.select(keep)


def _bound(rows: pl.DataFrame, dialect: str) -> pl.DataFrame:
    """The frame as the database driver takes it (see :func:`replace_hours`)."""
    frame = _hour_frame(rows)
    money = [c for c in _MONEY.values() if c in frame.columns]
    if dialect == "postgresql":
        return frame.with_columns(
            *[bulk.nanos_text(c) for c in money],
            bulk.pg_time("hour_start"),
        )
    return frame.with_columns(
        *[pl.col(c).cast(pl.Int64) for c in money],
        bulk.sqlite_time("hour_start"),
    )


def _records(rows: pl.DataFrame) -> list[dict[str, object]]:
    """Frame → insert parameters: money from integer nanos to Decimal, only ledger_hour columns."""
    frame = rows.rename({k: v for k, v in _MONEY.items() if k in rows.columns})
    keep = [c for c in frame.columns if c in _HOUR_COLUMNS]
    records = frame.select(keep).to_dicts()
    money = [c for c in _MONEY.values() if c in keep]
    for record in records:
        for column in money:
            value = record[column]
            record[column] = None if value is None else from_nanos(value)
    return records


def rebuild_days(conn: Connection, first_day: int, last_day: int) -> None:
    """Recompute every rollup of days ``[first_day, last_day]`` from ``ledger_hour``, in SQL:
    ``ledger_day`` here, the group rollups by :func:`service.ledger.rollups.rebuild`. Every writer
    of ``ledger_hour`` calls this in its transaction, so none can forget one of the rollups."""
    retention.check_writable(conn, first_day)
    with rollups.hash_grouping(conn):  # group in memory, not by sorting wide rows on disk
        _rebuild_ledger_day(conn, first_day, last_day)
        rollups.rebuild(conn, first_day, last_day)
    segments.rebuild(conn, first_day, last_day)


def _rebuild_ledger_day(conn: Connection, first_day: int, last_day: int) -> None:
    """``ledger_day`` of days ``[first_day, last_day]``: one ``INSERT … SELECT … GROUP BY``."""
    hour, day = table_of(LedgerHour), table_of(LedgerDay)
    conn.execute(delete(day).where(day.c.day_index >= first_day, day.c.day_index <= last_day))
    keys = [hour.c.device_id, hour.c.day_index, hour.c.workload_key, hour.c.currency]
    columns = [
        *keys,
        func.max(hour.c.month_index).label("month_index"),
        func.count().label("hours"),
        *[func.max(hour.c[name]).label(name) for name in _DIMENSIONS],
        *[func.sum(hour.c[name]).label(name) for name in _SUMMED],
        *[func.max(hour.c[name]).label(name) for name in _MAXED],
        (func.max(case((hour.c.energy_estimated, 1), else_=0)) > 0).label("energy_estimated"),
    ]
    query = select(*columns).where(*rollups.hour_days(first_day, last_day)).group_by(*keys)
    names = [c.name for c in query.selected_columns]
    conn.execute(insert(day).from_select(names, query))


def upsert_devices(conn: Connection, source: str, devices: Iterable[DeviceInfo], seen: pl.DataFrame) -> None:
    """Insert or refresh devices; ``seen`` has device_id, first_ms, last_ms, metrics (comma list).

    A refreshed device keeps the earliest ``first_seen``, the latest ``last_seen`` and the union of
    its metrics; its description and source become the batch's. Two statements per batch however
    many devices: one ``SELECT`` of the batch's known devices (in chunks of ``KEY_CHUNK`` ids) and
    one ``INSERT … ON CONFLICT (device_id) DO UPDATE`` executed over all of them.
    """
    table = table_of(Device)
    by_id = {d.device_id: d for d in devices}
    seen_by_id = {r["device_id"]: r for r in seen.to_dicts()}
    wanted = [device_id for device_id in by_id if device_id in seen_by_id]
    if not wanted:
        return
    existing: dict[str, tuple[dt.datetime, dt.datetime, str]] = {}
    for i in range(0, len(wanted), KEY_CHUNK):
        chunk = wanted[i : i + KEY_CHUNK]
        query = select(table.c.device_id, table.c.first_seen, table.c.last_seen, table.c.metrics).where(
            table.c.device_id.in_(chunk)
        )
        existing.update((r.device_id, (r.first_seen, r.last_seen, r.metrics)) for r in conn.execute(query))
    records: list[dict[str, object]] = []
    for device_id in wanted:
        info, stats = by_id[device_id], seen_by_id[device_id]
        first = from_ms(stats["first_ms"])
        last = from_ms(stats["last_ms"])
        metrics = set(filter(None, (stats["metrics"] or "").split(",")))
        old = existing.get(device_id)
        if old is not None:
            first, last = min(first, old[0]), max(last, old[1])
            metrics |= set(filter(None, old[2].split(",")))
        record: dict[str, object] = {f: getattr(info, f) for f in names(DEVICE) if f != "device_id"}
        record.update(
            tags=dict(info.tags) or None,  # attribution facts (docs/attribution.md)
            device_id=device_id,
            source=source,
            first_seen=first,
            last_seen=last,
            metrics=",".join(sorted(metrics)),
        )
        records.append(record)
    conn.execute(_upsert(table, conn.dialect.name, [c for c in records[0] if c != "device_id"]), records)


def _upsert(table: Table, dialect: str, columns: Sequence[str]) -> Executable:
    """``INSERT … ON CONFLICT (device_id) DO UPDATE SET`` each of ``columns`` to the new value."""
    if dialect == "postgresql":
        pg = pg_insert(table)
        return pg.on_conflict_do_update(
            index_elements=[table.c.device_id], set_={c: pg.excluded[c] for c in columns}
        )
    if dialect == "sqlite":
        lite = sqlite_insert(table)
        return lite.on_conflict_do_update(
            index_elements=[table.c.device_id], set_={c: lite.excluded[c] for c in columns}
        )
    raise NotImplementedError(f"upsert_devices: no INSERT … ON CONFLICT for {dialect}")


#: Device ids per ``IN (…)`` of :func:`upsert_devices`: under both databases' parameter limits.
KEY_CHUNK = 5_000
