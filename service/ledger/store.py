"""Writing the ledger: replace a window's hourly rows, rebuild the daily rollup, upsert devices.

Idempotency is by window (DESIGN §3.5): re-ingesting ``[start, end)`` deletes that window's rows
of the source and of every device in the batch, then inserts the new rows, in one transaction.
The rollup of every day the window touches is rebuilt from ``ledger_hour`` in SQL in the same
transaction, so late data that rewrites an hour can never leave a stale daily figure behind.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import polars as pl
from sqlalchemy import Connection, case, delete, func, insert, or_, select

from connectors.base import DeviceInfo
from connectors.sdk.shapes import DEVICE, WORKLOAD, names
from service.dbtypes import table_of
from service.metrics_catalog import HIST_COLUMNS, UTIL_METRICS
from service.models import Device, LedgerDay, LedgerHour
from service.money import from_nanos
from service.timeutil import from_ms

_SUMMED = (
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
_MAXED = ("mem_used_max_b", "mem_total_b", "temp_max_c")
# Constant within a (device, day, workload, currency) group, so the rollup keeps any one (max):
# the described attributes every ledger row carries, less the group's own keys, and the ingest's.
_DIMENSIONS = (
    "source",
    *[a.name for a in (*DEVICE, *WORKLOAD) if a.ledger and a.name not in ("device_id", "workload_key")],
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
    """Replace ledger hours ``[start_hour, end_hour)`` of ``source`` and of ``device_ids`` by ``rows``."""
    table = table_of(LedgerHour)
    scope = (
        or_(table.c.source == source, table.c.device_id.in_(list(device_ids)))
        if device_ids
        else (table.c.source == source)
    )
    conn.execute(delete(table).where(table.c.hour_index >= start_hour, table.c.hour_index < end_hour, scope))
    records = _records(rows)
    if records:
        conn.execute(insert(table), records)
    return len(records)


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
    """Recompute ``ledger_day`` for days ``[first_day, last_day]`` from ``ledger_hour``, in SQL."""
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
    query = (
        select(*columns).where(hour.c.day_index >= first_day, hour.c.day_index <= last_day).group_by(*keys)
    )
    names = [c.name for c in query.selected_columns]
    conn.execute(insert(day).from_select(names, query))


def upsert_devices(conn: Connection, source: str, devices: Iterable[DeviceInfo], seen: pl.DataFrame) -> None:
    """Insert or refresh devices; ``seen`` has device_id, first_ms, last_ms, metrics (comma list)."""
    table = table_of(Device)
    by_id = {d.device_id: d for d in devices}
    seen_by_id = {r["device_id"]: r for r in seen.to_dicts()}
    existing = {
        r.device_id: r
        for r in conn.execute(select(table).where(table.c.device_id.in_(list(by_id)))).mappings()
        if r is not None
    }
    for device_id, info in by_id.items():
        stats = seen_by_id.get(device_id)
        if stats is None:
            continue
        first = from_ms(stats["first_ms"])
        last = from_ms(stats["last_ms"])
        values = {f: getattr(info, f) for f in names(DEVICE) if f != "device_id"}
        values["source"] = source
        old = existing.get(device_id)
        metrics = set(filter(None, (stats["metrics"] or "").split(",")))
        if old is None:
            conn.execute(
                insert(table).values(
                    device_id=device_id,
                    first_seen=first,
                    last_seen=last,
                    metrics=",".join(sorted(metrics)),
                    **values,
                )
            )
        else:
            metrics |= set(filter(None, old["metrics"].split(",")))
            conn.execute(
                table.update()
                .where(table.c.device_id == device_id)
                .values(
                    first_seen=min(first, old["first_seen"]),
                    last_seen=max(last, old["last_seen"]),
                    metrics=",".join(sorted(metrics)),
                    **values,
                )
            )
