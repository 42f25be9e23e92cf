"""Decoded day segments kept between reads (service.ledger.segments.DECODED, PostgreSQL): a day held
in the version stored now is neither fetched nor decoded again and reads the same frame; a day
rewritten since (a new row version) is read anew; the set is bounded, least recently used out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest
from ledger_rows import at, rebuild_days, row
from polars.testing import assert_frame_equal
from sqlalchemy import Engine, update
from sqlmodel import Session

from service.analytics.access import ALL
from service.analytics.dims import Dimension, Granularity
from service.analytics.paging import Page
from service.analytics.query import LedgerQuery
from service.analytics.usage import usage
from service.analytics.window import check_window
from service.ledger import segments, store, version
from service.models import LedgerHour

COLUMNS = ("hour_index", "device_id", "gpu_busy_s")


@pytest.fixture
def pg(engine: Engine) -> Iterator[Engine]:
    if engine.dialect.name != "postgresql":
        pytest.skip("decoded segments are kept on PostgreSQL (a row version names the stored bytes)")
    segments.DECODED.clear()
    yield engine
    segments.DECODED.clear()


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every segment decoded."""
    seen: list[int] = []
    decode = segments.decode

    def counted(data: bytes, columns: Any = None) -> pl.DataFrame:
        seen.append(len(data))
        return decode(data, columns)

    monkeypatch.setattr(segments, "decode", counted)
    return seen


def _three_days(engine: Engine) -> int:
    """Two GPUs, one hour on each of three days; the first day's index."""
    rows = [
        row(h, device, busy_s=100.0 * h + i)
        for h in (1, 25, 49)
        for i, device in enumerate(("GPU-a", "GPU-b"))
    ]
    with Session(engine) as session:
        session.add_all(rows)
        session.commit()
    rebuild_days(engine)
    return int(at(0).timestamp()) // 86400


def _load(engine: Engine, days: list[int], columns: tuple[str, ...] = COLUMNS) -> list[pl.DataFrame]:
    with engine.connect() as conn:
        return list(segments.load(conn, days, columns))


def test_a_held_day_is_neither_fetched_nor_decoded(pg: Engine, decodes: list[int]) -> None:
    d0 = _three_days(pg)
    first = _load(pg, [d0, d0 + 1])
    assert len(decodes) == 2 and len(segments.DECODED) == 2
    second = _load(pg, [d0 + 1, d0 + 2])  # a next page: its first day was the last one's
    assert len(decodes) == 3
    assert_frame_equal(second[0], first[1])
    assert second[1]["gpu_busy_s"].to_list() == [4900.0, 4901.0]
    segments.DECODED.clear()
    for held, fresh in zip(second, _load(pg, [d0 + 1, d0 + 2]), strict=True):
        assert_frame_equal(held, fresh)
    # other columns are another read
    assert len(_load(pg, [d0], ("hour_index", "device_id"))[0].columns) == 2
    assert len(decodes) == 6


def test_a_rewritten_day_is_read_anew(pg: Engine, decodes: list[int]) -> None:
    d0 = _three_days(pg)
    q = LedgerQuery(
        check_window(at(0), at(72), max_days=10), Granularity.HOUR, (Dimension.DEVICE,), access=ALL
    )
    with pg.connect() as conn:
        before = [r.effective_gpu_hours for r in usage(conn, q, page=Page("usage", first=10))]
    assert before[0] == pytest.approx(100.0 / 3600)
    with pg.begin() as conn:  # a writer changes hour 1 and rebuilds its day, as ingest does
        conn.execute(
            update(LedgerHour).where(LedgerHour.hour_index == at(1).timestamp() // 3600).values(busy_s=1800.0)
        )
        store.rebuild_days(conn, d0, d0)
        version.bump(conn)
    decodes.clear()
    with pg.connect() as conn:
        after = [r.effective_gpu_hours for r in usage(conn, q, page=Page("usage", first=10))]
    assert after[:2] == [0.5, 0.5] and after[2:] == before[2:]
    assert len(decodes) == 1  # the rewritten day; the other two were held


def test_least_recently_used_out_and_bytes_bounded() -> None:
    held = segments.DecodedSegments(max_entries=2, max_b=10_000)
    frame = pl.DataFrame({"x": [1.0] * 100})  # 800 bytes
    database = ("h", 5432, "db", 1, None)
    for day in (1, 2):
        held.put((database, day, f"{day}:v", ("x",)), frame)
    held.touch((database, 1, "1:v", ("x",)))  # day 1 used last: day 2 goes first
    held.put((database, 3, "3:v", ("x",)), frame)
    assert set(held.held(database, [1, 2, 3], ("x",))) == {1, 3}
    assert held.held(("other", 5432, "db", 1, None), [1, 3], ("x",)) == {}
    held.put((database, 4, "4:v", ("x",)), pl.DataFrame({"x": [1.0] * 2000}))  # 16,000 bytes: not kept
    assert set(held.held(database, [1, 3, 4], ("x",))) == {1, 3}
    small = segments.DecodedSegments(max_entries=10, max_b=2_000)
    for day in (1, 2, 3):
        small.put((database, day, f"{day}:v", ("x",)), frame)
    assert set(small.held(database, [1, 2, 3], ("x",))) == {2, 3}  # 2 × 800 bytes fit, not 3
