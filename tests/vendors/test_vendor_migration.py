"""The migration adding ``vendor`` names the vendor of rows stored before it from their gpu_model
(the same rule as at ingest), leaves a model it does not know NULL, and goes down again — on
SQLite and on PostgreSQL; a ledger ingested, taken down to 0013/0008/0005 and up again has the
vendor in its hours, daily and group rollups and segments (a vendor only its source knew is lost:
the migration can only read the model)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import sqlalchemy as sa
from vendor_fleet import H10, Fleet

from service.db import downgrade, make_engine, migrate
from service.ledger import segments
from service.ledger.ingest import ingest_window
from service.models import Device, LedgerDay, LedgerGroupHour, LedgerHour, LedgerHourSegment

BEFORE = "0013"
T0 = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
MODELS = {
    "GPU-a": "NVIDIA H100 80GB HBM3",
    "amd-1": "AMD Instinct MI300X",
    "npu-1": "Ascend910B",
    "x-1": "Foo 9",
}


def _row(model: Any, have: set[str]) -> dict[str, Any]:
    return {k: v for k, v in model.model_dump().items() if k in have and k != "id"}


def _check(url: str) -> None:
    migrate(url, BEFORE)
    engine = make_engine(url)
    try:
        inspector = sa.inspect(engine)
        device_cols = {c["name"] for c in inspector.get_columns("device")}
        day_cols = {c["name"] for c in inspector.get_columns("ledger_day")}
        assert "vendor" not in device_cols
        with engine.begin() as conn:
            for device_id, model in MODELS.items():
                device = Device(device_id=device_id, environment="onprem", source="s", gpu_model=model,
                                first_seen=T0, last_seen=T0)  # fmt: skip
                conn.execute(
                    sa.table("device", *map(sa.column, device_cols)).insert(), _row(device, device_cols)
                )
                day = LedgerDay(source="s", device_id=device_id, environment="onprem", gpu_model=model,
                                default_metric="gpu_util", day_index=20394, month_index=682)  # fmt: skip
                conn.execute(sa.table("ledger_day", *map(sa.column, day_cols)).insert(), _row(day, day_cols))
        migrate(engine)
        with engine.connect() as conn:
            for table in ("device", "ledger_day"):
                got = dict(conn.execute(sa.text(f"SELECT device_id, vendor FROM {table}")).all())  # noqa: S608
                assert got == {"GPU-a": "nvidia", "amd-1": "amd", "npu-1": "huawei", "x-1": None}, table
        downgrade(engine, BEFORE)
        assert "vendor" not in {c["name"] for c in sa.inspect(engine).get_columns("ledger_day")}
        migrate(engine)
    finally:
        engine.dispose()


def test_sqlite_existing_rows_get_their_vendor(tmp_path: Path) -> None:
    _check(f"sqlite:///{tmp_path / 'v.db'}")


@pytest.mark.postgres
def test_postgres_existing_rows_get_their_vendor(
    fresh_pg_database: Callable[[], AbstractContextManager[str]],
) -> None:
    with fresh_pg_database() as url:
        _check(url)


def _roundtrip(url: str, back_to: str) -> None:
    migrate(url)
    engine = make_engine(url)
    try:
        ingest_window(engine, "fleet", Fleet(), H10, H10 + dt.timedelta(hours=1))
        downgrade(engine, back_to)
        migrate(engine)
        # from gpu_model only: board-3's source said amd, its part number says nothing
        derived = {"npu-0": "huawei", "GPU-1": "nvidia", "board-2": None, "board-3": None}
        with engine.connect() as conn:
            for table in (Device, LedgerHour, LedgerDay, LedgerGroupHour):
                t = table.__table__  # type: ignore[attr-defined]
                if "device_id" in t.c:
                    got = dict(conn.execute(sa.select(t.c.device_id, t.c.vendor)).all())
                    assert got == derived, table
                else:  # the group rollups: one row per model here
                    got = dict(conn.execute(sa.select(t.c.gpu_model, t.c.vendor)).all())
                    assert got == {"Ascend 910B3": "huawei", "NVIDIA H100 80GB HBM3": "nvidia",
                                   "102-D65208-0C": None}, table  # fmt: skip
            arrow = conn.execute(sa.select(LedgerHourSegment.__table__.c.arrow)).scalar_one()  # type: ignore[attr-defined]
        segment = segments.decode(arrow, ["device_id", "vendor"]).with_columns(pl.all().cast(pl.String))
        assert dict(segment.rows()) == derived
    finally:
        engine.dispose()


@pytest.mark.parametrize("back_to", ["0013", "0008", "0005"])
def test_sqlite_ledger_rows_rollups_and_segments_get_the_vendor(tmp_path: Path, back_to: str) -> None:
    _roundtrip(f"sqlite:///{tmp_path / 'r.db'}", back_to)


@pytest.mark.postgres
@pytest.mark.parametrize("back_to", ["0013", "0005"])
def test_postgres_ledger_rows_rollups_and_segments_get_the_vendor(
    fresh_pg_database: Callable[[], AbstractContextManager[str]], back_to: str
) -> None:
    with fresh_pg_database() as url:
        _roundtrip(url, back_to)
