"""The store's bulk writes: the same stored rows as the per-row ``insert`` they replaced, on SQLite
and PostgreSQL; devices upserted in a constant number of statements per batch."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import polars as pl
import pytest
from sqlalchemy import Connection, Engine, event, insert, select, text

from connectors.base import DeviceInfo
from service.dbtypes import table_of
from service.ledger import store
from service.models import Device, LedgerHour
from service.money import from_nanos

UTC = dt.UTC
H0 = dt.datetime(2026, 11, 2, 5, tzinfo=UTC)
HOUR = int(H0.timestamp()) // 3600
MS = 1000


def batch() -> pl.DataFrame:
    """Four hand-built ledger rows as ``_ingest_chunk`` hands them over: money in ``*_nanos``, an
    extra column the table lacks (``tdp_w``), and no ``idle_s``/``hist_*``/``rate_source`` columns
    (their column defaults apply)."""
    n = 4
    return pl.DataFrame(
        {
            "device_id": ["GPU-a", "GPU-a", "GPU-b", "MIG-c"],
            "hour_index": [HOUR, HOUR + 1, HOUR, HOUR],
            "workload_key": ["", 'ns/pod,"q"', "", "naïve\nline"],
            "default_metric": ["sm_active", "sm_active", "gpu_util", "gpu_util"],
            "present_s": [3600.0, 1800.0, 3600.0, 0.1 + 0.2],
            "observed_s": [3599.999999999999, 1e-10, 3600.0, 1 / 3],
            "busy_s": [1234.5678901234567, 0.0, 1e300, 2.0 / 3.0],
            "energy_j": [1.5e9, None, 123456789.12345679, 5e-324],
            "mem_used_max_b": [8.0e10, None, None, 1.0],
            "environment": ["onprem", "onprem", "aws", "gcp"],
            "provider": [None, None, "aws", ""],
            "gpu_model": ["H200", "H200", "A100", "H100 MIG 1g.10gb"],
            "gpu_fraction": [1.0, 1.0, 1.0, 1 / 7],
            "tdp_w": [700.0, 700.0, 400.0, 100.0],
            "project": [None, "p,1", None, "é"],
            "source": ["demo"] * n,
            "hour_start": pl.Series([H0, H0 + dt.timedelta(hours=1), H0, H0], dtype=pl.Datetime("us", "UTC")),
            "day_index": [HOUR // 24] * n,
            "month_index": [(2026 - 1970) * 12 + 10] * n,
            "cost_nanos": [1_234_567_891, -1, 0, None],
            "idle_cost_nanos": [999_999_999_999_999_999, 1, None, 10**9],
            "energy_cost_nanos": [None, 5, -(10**12) - 1, 7],
            "currency": ["USD", "USD", "EUR", None],
            "energy_estimated": [True, False, False, False],
        },
        schema_overrides={"energy_j": pl.Float64, "mem_used_max_b": pl.Float64},
    )


def old_write(conn: Connection, rows: pl.DataFrame) -> None:
    """How ``replace_hours`` wrote before (the reference): dicts with a ``Decimal`` per money
    value through ``insert(ledger_hour)``."""
    money = {"cost_nanos": "cost", "idle_cost_nanos": "idle_cost", "energy_cost_nanos": "energy_cost"}
    columns = {c.name for c in table_of(LedgerHour).columns} - {"id"}
    frame = rows.rename(money)
    records = frame.select([c for c in frame.columns if c in columns]).to_dicts()
    for record in records:
        for column in money.values():
            record[column] = None if record[column] is None else from_nanos(record[column])
    conn.execute(insert(table_of(LedgerHour)), records)


def stored(conn: Connection) -> list[tuple[Any, ...]]:
    """Every ``ledger_hour`` row as the driver returns it (raw: SQLite's text and integers)."""
    names = [c.name for c in table_of(LedgerHour).columns if c.name != "id"]
    quoted = ", ".join(f'"{n}"' for n in names)
    sql = f"SELECT {quoted} FROM ledger_hour ORDER BY device_id, hour_index, workload_key"
    return [tuple(r) for r in conn.execute(text(sql))]


def test_rows_are_stored_exactly_as_the_per_row_insert_stored_them(engine: Engine) -> None:
    rows = batch()
    with engine.begin() as conn:
        old_write(conn, rows)
        before = stored(conn)
    with engine.begin() as conn:
        written = store.replace_hours(conn, "demo", HOUR, HOUR + 2, ["GPU-a", "GPU-b", "MIG-c"], rows)
        after = stored(conn)
    assert written == 4
    assert len(before) == 4
    assert after == before
    # the values themselves, read back through the column types: exact money, UTC times
    table = table_of(LedgerHour)
    with engine.connect() as conn:
        got = conn.execute(
            select(
                table.c.workload_key,
                table.c.hour_start,
                table.c.cost,
                table.c.idle_cost,
                table.c.energy_cost,
                table.c.present_s,
                table.c.busy_s,
                table.c.energy_j,
                table.c.idle_s,
                table.c.hist_0_1_s,
                table.c.rate_source,
                table.c.provider,
                table.c.energy_estimated,
            ).order_by(table.c.device_id, table.c.hour_index)
        ).all()
    assert [tuple(r) for r in got] == [
        ("", H0, Decimal("1.234567891"), Decimal("999999999.999999999"), None)
        + (3600.0, 1234.5678901234567, 1.5e9, 0.0, 0.0, None, None, True),
        ('ns/pod,"q"', H0 + dt.timedelta(hours=1), Decimal("-0.000000001"), Decimal("0.000000001"))
        + (Decimal("0.000000005"), 1800.0, 0.0, None, 0.0, 0.0, None, None, False),
        ("", H0, Decimal("0E-9"), None, Decimal("-1000.000000001"), 3600.0, 1e300, 123456789.12345679)
        + (0.0, 0.0, None, "aws", False),
        ("naïve\nline", H0, None, Decimal("1.000000000"), Decimal("0.000000007"), 0.1 + 0.2, 2.0 / 3.0)
        + (5e-324, 0.0, 0.0, None, "", False),
    ]
    assert all(r[1].tzinfo == UTC for r in got)


def test_rewriting_the_window_is_a_no_op_and_scoped(engine: Engine) -> None:
    rows = batch()
    with engine.begin() as conn:
        store.replace_hours(conn, "demo", HOUR, HOUR + 2, ["GPU-a", "GPU-b", "MIG-c"], rows)
        once = stored(conn)
    with engine.begin() as conn:
        assert store.replace_hours(conn, "demo", HOUR, HOUR + 2, ["GPU-a", "GPU-b", "MIG-c"], rows) == 4
        assert stored(conn) == once
    # a window of one hour replaces only that hour's rows; an empty batch empties it
    with engine.begin() as conn:
        assert store.replace_hours(conn, "demo", HOUR + 1, HOUR + 2, ["GPU-a"], rows.head(0)) == 0
        left = conn.execute(text("SELECT device_id, hour_index FROM ledger_hour ORDER BY 1, 2")).all()
    assert [tuple(r) for r in left] == [("GPU-a", HOUR), ("GPU-b", HOUR), ("MIG-c", HOUR)]


def test_a_failed_transaction_leaves_nothing(engine: Engine) -> None:
    rows = batch()
    with pytest.raises(RuntimeError), engine.begin() as conn:
        store.replace_hours(conn, "demo", HOUR, HOUR + 2, ["GPU-a"], rows)
        raise RuntimeError("after the write, before the commit")
    with engine.connect() as conn:
        assert stored(conn) == []


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[str]]:
    """The SQL statements the engine sends (an ``executemany`` counts once)."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement.split()[0].upper())

    event.listen(engine, "before_cursor_execute", record)
    yield sent
    event.remove(engine, "before_cursor_execute", record)


def seen(*rows: tuple[str, int, int, str]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["device_id", "first_ms", "last_ms", "metrics"], orient="row")


def devices(engine: Engine) -> list[tuple[Any, ...]]:
    table = table_of(Device)
    with engine.connect() as conn:
        query = select(
            table.c.device_id,
            table.c.source,
            table.c.node,
            table.c.gpu_model,
            table.c.gpu_fraction,
            table.c.metrics,
            table.c.first_seen,
            table.c.last_seen,
        ).order_by(table.c.device_id)
        return [tuple(r) for r in conn.execute(query)]


T0 = 1_793_000_000_000  # 2026-10-27T09:33:20Z


def at(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / MS, UTC)


def test_devices_are_inserted_then_refreshed_in_two_statements(engine: Engine, statements: list[str]) -> None:
    first = [
        DeviceInfo("GPU-a", "onprem", node="n1", gpu_model="H200"),
        DeviceInfo("GPU-b", "onprem", node="n1", gpu_model="H200"),
        DeviceInfo("GPU-unseen", "onprem", node="n1"),  # described but no sample: not stored
    ]
    with engine.begin() as conn:
        store.upsert_devices(
            conn, "demo", first, seen(("GPU-a", T0, T0 + 60_000, "sm_active,power"), ("GPU-b", T0, T0, ""))
        )
    assert statements == ["SELECT", "INSERT"]
    assert devices(engine) == [
        ("GPU-a", "demo", "n1", "H200", 1.0, "power,sm_active", at(T0), at(T0 + 60_000)),
        ("GPU-b", "demo", "n1", "H200", 1.0, "", at(T0), at(T0)),
    ]
    statements.clear()
    second = [
        DeviceInfo("GPU-a", "onprem", node="n2", gpu_model="H200 NVL", gpu_fraction=3 / 7),
        DeviceInfo("GPU-b", "onprem", node="n1", gpu_model="H200"),
        DeviceInfo("GPU-c", "aws", node="i-1", gpu_model="A10G"),
    ]
    with engine.begin() as conn:
        store.upsert_devices(
            conn,
            "demo2",
            second,
            seen(
                ("GPU-a", T0 + 30_000, T0 + 90_000, "gpu_util,power"),  # later start: first_seen kept
                ("GPU-b", T0 - 1, T0 - 1, "temp"),  # earlier: first_seen moves, last_seen kept
                ("GPU-c", T0, T0 + 1, "gpu_util"),
            ),
        )
    assert statements == ["SELECT", "INSERT"]
    assert devices(engine) == [
        ("GPU-a", "demo2", "n2", "H200 NVL", 3 / 7, "gpu_util,power,sm_active", at(T0), at(T0 + 90_000)),
        ("GPU-b", "demo2", "n1", "H200", 1.0, "temp", at(T0 - 1), at(T0)),
        ("GPU-c", "demo2", "i-1", "A10G", 1.0, "gpu_util", at(T0), at(T0 + 1)),
    ]


def test_device_statements_do_not_grow_with_the_fleet(engine: Engine, statements: list[str]) -> None:
    fleet = [DeviceInfo(f"GPU-{i:04d}", "onprem", node=f"n{i // 8}", gpu_index=i % 8) for i in range(600)]
    stats = seen(*[(d.device_id, T0, T0 + 3_600_000, "sm_active") for d in fleet])
    for _ in range(2):  # all new, then all known
        statements.clear()
        with engine.begin() as conn:
            store.upsert_devices(conn, "demo", fleet, stats)
        assert statements == ["SELECT", "INSERT"]
    with engine.connect() as conn:
        count = conn.execute(text("SELECT count(*), min(gpu_index), max(gpu_index) FROM device")).one()
    assert tuple(count) == (600, 0, 7)
