"""Day segments in format 2 (text columns as sorted dictionaries) and the way from format 1.

A database whose segments were written before dictionaries (format 1: plain text columns) must
answer the same, and migration 0012 must rewrite its segments in format 2. The format-1 files
are made here from the format-2 ones the way format 1 wrote them (``write_ipc``, LZ4, text as
``String``), on SQLite and PostgreSQL.
"""

from __future__ import annotations

import io
from typing import Any

import polars as pl
from ledger_rows import at, row
from sqlalchemy import Engine, select, update
from sqlmodel import Session

from service.analytics.access import ALL
from service.analytics.columnar import usage_frame
from service.analytics.dims import MIXED_DEFAULT_METRIC, Dimension, Granularity
from service.analytics.query import LedgerQuery
from service.analytics.window import check_window
from service.db import current_revision, downgrade, migrate
from service.ledger import segments, store

SEGMENT = segments.SEGMENT
MIGRATION = "0012"


def _fill(engine: Engine) -> None:
    rows = [
        row(0, "GPU-b", "job-1", project="alpha", busy_s=900.0, idle_s=600.0),
        row(0, "GPU-a", default_metric="gpu_util"),
        row(0, "gpu-é", "job-2", project="beta", team="t1"),
        row(0, "gpu-é", "job-3", project="alpha", default_metric="gpu_util"),  # a mixed device-hour
        row(30, "GPU-c", "job-1", project="alpha"),  # the next day: another dictionary
    ]
    with Session(engine) as session:
        session.add_all(rows)
        session.commit()
    with engine.begin() as conn:
        store.rebuild_days(conn, int(at(0).timestamp()) // 86400, int(at(30).timestamp()) // 86400)


def _answer(engine: Engine) -> list[tuple[Any, ...]]:
    q = LedgerQuery(
        check_window(at(0), at(48), max_days=400), Granularity.HOUR, (Dimension.DEVICE,), access=ALL
    )
    with engine.connect() as conn:
        frame = usage_frame(conn, q)
    return frame.with_columns(pl.col("device", "metric").cast(pl.String)).rows()


def _stored(engine: Engine) -> dict[int, pl.DataFrame]:
    with engine.connect() as conn:
        stored = conn.execute(select(SEGMENT.c.day_index, SEGMENT.c.arrow)).all()
    return {int(day): pl.read_ipc(io.BytesIO(bytes(data))) for day, data in stored}


def _to_format_1(engine: Engine) -> None:
    with engine.begin() as conn:
        for day, frame in _stored(engine).items():
            sink = io.BytesIO()
            frame.with_columns(pl.col(name).cast(pl.String) for name in segments.TEXT_COLUMNS).write_ipc(
                sink, compression="lz4"
            )
            conn.execute(update(SEGMENT).where(SEGMENT.c.day_index == day).values(arrow=sink.getvalue()))


def test_format_2_stores_text_as_sorted_dictionaries_of_the_day(engine: Engine) -> None:
    _fill(engine)
    days = _stored(engine)
    assert len(days) == 2
    first, second = (days[d] for d in sorted(days))
    device = first.schema["device_id"]
    assert isinstance(device, pl.Enum) and device.categories.to_list() == ["GPU-a", "GPU-b", "gpu-é"]
    assert first["device_id"].to_list() == ["GPU-a", "GPU-b", "gpu-é", "gpu-é"]
    assert second.schema["device_id"] == pl.Enum(["GPU-c"])
    metric = first.schema["default_metric"]
    assert isinstance(metric, pl.Enum)
    assert metric.categories.to_list() == sorted(["gpu_util", "sm_active", MIXED_DEFAULT_METRIC])
    project = first.schema["project"]
    assert isinstance(project, pl.Enum) and project.categories.to_list() == ["alpha", "beta"]
    assert first["project"].to_list() == [None, "alpha", "beta", "alpha"]
    assert second.schema["node"] == pl.Enum([])  # a column of nulls only


def test_format_1_segments_answer_the_same_and_the_migration_rewrites_them(engine: Engine) -> None:
    _fill(engine)
    want = _answer(engine)
    assert [(r[1], r[-1]) for r in want] == [
        ("GPU-a", "gpu_util"),
        ("GPU-b", "sm_active"),
        ("gpu-é", MIXED_DEFAULT_METRIC),
        ("GPU-c", "sm_active"),
    ]
    _to_format_1(engine)
    assert all(frame.schema["device_id"] == pl.String for frame in _stored(engine).values())
    assert _answer(engine) == want  # read on the fly
    downgrade(engine, "0011")
    migrate(engine)
    assert (current_revision(engine) or "") >= MIGRATION
    rewritten = _stored(engine)
    assert len(rewritten) == 2
    assert all(
        isinstance(frame.schema[n], pl.Enum) for frame in rewritten.values() for n in segments.TEXT_COLUMNS
    )
    assert _answer(engine) == want
