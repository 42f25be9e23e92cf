"""Monthly partitions of ledger_hour on PostgreSQL (migration 0006) and `gpu-ledger prune`.

* 0006 converts a ledger that has rows: the same rows, one partition per month they span, the
  group rollups filled, and the schema still what the models say (Alembic's drift check);
* an ingest writing a month without partition creates it in its transaction, moving what the
  DEFAULT partition held of that month; a month's hours are read from its partition alone;
* prune drops whole months (partitions on PostgreSQL, a DELETE on SQLite), keeps ledger_day and the
  group rollups, keeps day-aligned answers exact, and refuses later rewrites of pruned days;
  ``--keep-days N`` prunes the months before the one holding now minus N days.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager
from decimal import Decimal
from typing import Any, ClassVar, Literal

import polars as pl
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from ledger_rows import row
from sqlalchemy import Engine, func, inspect, select, text
from sqlmodel import Session, SQLModel
from typer.testing import CliRunner

from connectors.base import SAMPLE_SCHEMA, ConnectorConfig, DeviceInfo, SampleBatch, Sampling
from migrations.support import compare_type
from service.analytics.access import ALL
from service.analytics.cost import cost
from service.analytics.dims import Dimension, Granularity
from service.analytics.query import LedgerQuery
from service.analytics.usage import usage
from service.analytics.window import Window
from service.cli import app
from service.db import make_engine, migrate
from service.ledger import partitions, retention
from service.ledger.ingest import ingest_window
from service.ledger.store import rebuild_days
from service.models import LedgerDay, LedgerGroupDay, LedgerGroupHour, LedgerHour, LedgerHourSegment
from service.timeutil import hour_index, month_index

UTC = dt.UTC
JAN = dt.datetime(2025, 1, 31, 20, tzinfo=UTC)  # 8 hours: 4 in January, 4 in February


def _rows() -> list[LedgerHour]:
    out = []
    for i in range(8):
        h = hour_index(JAN) + i - hour_index(dt.datetime(2025, 1, 6, tzinfo=UTC))
        out.append(row(h, "GPU-a", "job-1", project="alpha", cost="1.000000001", idle_cost="0.5"))
        out.append(row(h, "GPU-b", "", environment="aws", cost="2.5", currency="EUR"))
    return out


def _hours(engine: Engine, only: Collection[str] | None = None) -> list[tuple[Any, ...]]:
    """Every ledger_hour row by id (``only``: of these columns, those an older schema has)."""
    t = LedgerHour.__table__
    columns = [c for c in t.columns if only is None or c.name in only]
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(*columns).order_by(t.c.id))]


def _attached(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return sorted(partitions.month_partitions(conn).values())


@pytest.fixture
def pg(fresh_pg_database: Callable[[], AbstractContextManager[str]]) -> Iterator[str]:
    with fresh_pg_database() as url:
        yield url


@pytest.mark.postgres
def test_0006_partitions_a_ledger_with_rows(pg: str) -> None:
    migrate(pg, "0005")
    engine = make_engine(pg)
    try:
        # the rows as the 0005 schema holds them: only its columns (later ones are added by later
        # migrations, which the models already have)
        old = {c["name"] for c in inspect(engine).get_columns("ledger_hour")}
        with engine.begin() as conn:
            conn.execute(
                LedgerHour.__table__.insert(),  # type: ignore[attr-defined]
                [{k: v for k, v in r.model_dump().items() if k in old and k != "id"} for r in _rows()],
            )
        before = _hours(engine, old)
        migrate(engine)
        assert _hours(engine, old) == before  # same rows, same ids
        assert _attached(engine) == ["ledger_hour_2025_01", "ledger_hour_2025_02"]
        with engine.connect() as conn:
            assert partitions.is_partitioned(conn)
            per_partition = dict(
                conn.execute(
                    text("SELECT tableoid::regclass::text, count(*) FROM ledger_hour GROUP BY 1")
                ).all()
            )
            assert per_partition == {
                f"{partitions.SCHEMA}.ledger_hour_2025_01": 8,
                f"{partitions.SCHEMA}.ledger_hour_2025_02": 8,
            }
            group = conn.execute(
                select(LedgerGroupDay.day_index, func.sum(LedgerGroupDay.cost)).group_by(
                    LedgerGroupDay.day_index
                )  # type: ignore[arg-type]
            ).all()
            assert sorted(group) == [(20119, Decimal("14.000000004")), (20120, Decimal("14.000000004"))]
            # the models and the migrated schema agree (partitions live in their own schema)
            context = MigrationContext.configure(conn, opts={"compare_type": compare_type})
            assert compare_metadata(context, SQLModel.metadata) == []
            # new rows still get ids from the same sequence
            last_id = conn.execute(select(func.max(LedgerHour.id))).scalar_one()
            assert conn.execute(text("SELECT nextval('ledger_hour_id_seq')")).scalar_one() == last_id + 1
    finally:
        engine.dispose()


class _OneReading:
    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = ConnectorConfig
    sampling = Sampling(period_s=60, max_gap_s=120, presence_gap_s=1800)

    def __init__(self, start: dt.datetime, minutes: int) -> None:
        ts = int(start.timestamp() * 1000)
        self.frame = pl.DataFrame(
            [("GPU-z", ts + m * 60_000, "gpu_util", 50.0, "", 1.0) for m in range(minutes)],
            schema=SAMPLE_SCHEMA,
            orient="row",
        )

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        lo, hi = int(start.timestamp() * 1000), int(end.timestamp() * 1000)
        yield SampleBatch(
            self.frame.filter((pl.col("ts_ms") >= lo) & (pl.col("ts_ms") < hi)),
            [DeviceInfo("GPU-z", "onprem")],
        )


@pytest.mark.postgres
def test_an_ingest_creates_its_months_partition_moving_default_rows(pg: str) -> None:
    migrate(pg)
    engine = make_engine(pg)
    try:
        march = dt.datetime(2025, 3, 10, tzinfo=UTC)
        # a writer that inserts without replace_hours (billing's unmonitored hours) lands in DEFAULT
        with Session(engine) as session:
            h = hour_index(march) - hour_index(dt.datetime(2025, 1, 6, tzinfo=UTC)) + 5
            session.add(row(h, "i-unmonitored", "", environment="aws", cost="3"))
            session.commit()
        assert _attached(engine) == []
        ingest_window(engine, "z", _OneReading(march, 120), march, march + dt.timedelta(hours=2))  # type: ignore[arg-type]
        assert _attached(engine) == ["ledger_hour_2025_03"]
        with engine.connect() as conn:
            where = dict(
                conn.execute(
                    text("SELECT device_id, tableoid::regclass::text FROM ledger_hour ORDER BY device_id")
                ).all()
            )
            assert where == {
                "GPU-z": f"{partitions.SCHEMA}.ledger_hour_2025_03",
                "i-unmonitored": f"{partitions.SCHEMA}.ledger_hour_2025_03",  # moved out of DEFAULT
            }
            # the analytics' hour reads are pruned to the window's partitions
            q = LedgerQuery(
                Window(march, march + dt.timedelta(hours=2)),
                Granularity.HOUR,
                (Dimension.DEVICE,),
                access=ALL,
            )
            compiled = select(func.count()).select_from(q.source()).compile(conn)
            plan = "\n".join(conn.exec_driver_sql("EXPLAIN " + str(compiled), compiled.params).scalars())
        assert "ledger_hour_2025_03" in plan and "ledger_hour_default" not in plan, plan
        # a second ingest of the month finds its partition: nothing more is created
        assert partitions.ensure_months(engine.connect(), hour_index(march), hour_index(march)) == []
    finally:
        engine.dispose()


def _put(engine: Engine, rows: list[Any]) -> None:
    with Session(engine) as session:
        session.add_all(rows)
        session.commit()
    with engine.begin() as conn:
        first, last = conn.execute(
            select(func.min(LedgerHour.day_index), func.max(LedgerHour.day_index))
        ).one()
        rebuild_days(conn, first, last)


def _rollup_counts(conn: Any) -> list[int]:
    tables = (LedgerDay.__table__, LedgerGroupHour.__table__, LedgerGroupDay.__table__)
    return [conn.execute(select(func.count()).select_from(t)).scalar_one() for t in tables]


def test_prune_keeps_rollups_and_day_aligned_answers(engine: Engine) -> None:
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:  # the rows below go through no ingest: make their months
            partitions.ensure_months(conn, hour_index(JAN), hour_index(JAN) + 8)
    _put(engine, _rows())
    day_aligned = Window(dt.datetime(2025, 1, 31, tzinfo=UTC), dt.datetime(2025, 2, 2, tzinfo=UTC))
    by_device = LedgerQuery(day_aligned, Granularity.DAY, (Dimension.DEVICE,), access=ALL)
    by_project = LedgerQuery(day_aligned, Granularity.DAY, (Dimension.PROJECT,), access=ALL)
    mid_day = LedgerQuery(
        Window(JAN, JAN + dt.timedelta(hours=8)), Granularity.TOTAL, (Dimension.PROJECT,), access=ALL
    )
    with engine.connect() as conn:
        answers = [cost(conn, by_device), usage(conn, by_project), cost(conn, mid_day)]
        rollups = _rollup_counts(conn)
    with engine.begin() as conn:
        with pytest.raises(ValueError, match="current or a future month"):
            retention.prune(
                conn, dt.datetime(2025, 3, 1, tzinfo=UTC), now=dt.datetime(2025, 2, 15, tzinfo=UTC)
            )
        with pytest.raises(ValueError, match="not the start of a UTC month"):
            retention.prune(conn, dt.datetime(2025, 2, 2, tzinfo=UTC))
        result = retention.prune(conn, dt.datetime(2025, 2, 1, tzinfo=UTC))
    assert result.rows_deleted == 8
    assert result.segments_deleted == 1  # 31 January held hours: its segment goes with them
    if engine.dialect.name == "postgresql":  # (the session's database may hold other tests' months)
        assert "ledger_hour_2025_01" in result.partitions_dropped
        assert all(name < "ledger_hour_2025_02" for name in result.partitions_dropped)
        attached = _attached(engine)
        assert "ledger_hour_2025_02" in attached
        assert all(name >= "ledger_hour_2025_02" for name in attached)
    with engine.connect() as conn:
        assert conn.execute(select(func.min(LedgerHour.hour_start))).scalar_one() == dt.datetime(
            2025, 2, 1, tzinfo=UTC
        )
        after = [cost(conn, by_device), usage(conn, by_project), cost(conn, mid_day)]
        segment_days = conn.execute(select(LedgerHourSegment.day_index)).scalars().all()  # type: ignore[call-overload]
        assert segment_days and min(segment_days) >= 20120  # 2025-02-01: none left of pruned days
        assert _rollup_counts(conn) == rollups
        # day-aligned answers (ledger_day, group rollups) and group answers of any window stay exact
        assert after == answers
        # a device-level answer of pruned hours does not: ledger_hour holds none of them
        hourly = usage(conn, dataclasses.replace(by_device, granularity=Granularity.HOUR))
        assert {r.key.period_start for r in hourly} == {
            dt.datetime(2025, 2, 1, h, tzinfo=UTC) for h in range(4)
        }
    # a rewrite of a pruned day is refused (it would rebuild that day's rollups from nothing)
    with engine.begin() as conn:
        with pytest.raises(retention.PrunedHistory, match="pruned"):
            rebuild_days(conn, 20118, 20120)
        rebuild_days(conn, 20120, 20120)  # days after the boundary stay writable
        assert retention.pruned_before(conn) == dt.datetime(2025, 2, 1, tzinfo=UTC)
        # an earlier cutoff does not move the boundary back
        retention.prune(conn, dt.datetime(2025, 1, 1, tzinfo=UTC))
        assert retention.pruned_before(conn) == dt.datetime(2025, 2, 1, tzinfo=UTC)
    assert month_index(JAN) == 660


def test_prune_cli(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_LEDGER_DATABASE_URL", sqlite_url)
    engine = make_engine(sqlite_url)
    try:
        _put(engine, _rows())
        runner = CliRunner()
        dry = runner.invoke(app, ["prune", "--before", "2025-02", "--dry-run"])
        assert dry.exit_code == 0, dry.output
        assert "would drop 8 hourly ledger rows and 1 day segments before 2025-02" in dry.output
        assert len(_hours(engine)) == 16
        bad = runner.invoke(app, ["prune", "--before", "2025-13"])
        assert bad.exit_code == 2 and "use YYYY-MM" in bad.output
        done = runner.invoke(app, ["prune", "--before", "2025-02"])
        assert done.exit_code == 0, done.output
        assert "dropped 8 hourly ledger rows and 1 day segments before 2025-02" in done.output
        assert len(_hours(engine)) == 8
    finally:
        engine.dispose()


def test_prune_cli_keep_days(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_LEDGER_DATABASE_URL", sqlite_url)
    engine = make_engine(sqlite_url)
    try:
        _put(engine, _rows())
        runner = CliRunner()
        for args in ([], ["--before", "2025-02", "--keep-days", "30"]):
            refused = runner.invoke(app, ["prune", *args])
            assert refused.exit_code == 2 and "one of --before YYYY-MM or --keep-days N" in refused.output
        assert runner.invoke(app, ["prune", "--keep-days", "0"]).exit_code == 2
        # now minus N days falls in February 2025: January goes (a day after midnight changes nothing)
        days = (dt.datetime.now(UTC) - dt.datetime(2025, 2, 1, tzinfo=UTC)).days
        kept = runner.invoke(app, ["prune", "--keep-days", str(days + 40), "--dry-run"])
        assert kept.exit_code == 0 and "would drop 0 hourly ledger rows" in kept.output, kept.output
        done = runner.invoke(app, ["prune", "--keep-days", str(days)])
        assert done.exit_code == 0, done.output
        assert "dropped 8 hourly ledger rows and 1 day segments before 2025-02" in done.output
        assert len(_hours(engine)) == 8
    finally:
        engine.dispose()


def test_boundary_keeping() -> None:
    now = dt.datetime(2026, 12, 2, 10, tzinfo=UTC)
    assert retention.boundary_keeping(35, now) == dt.datetime(2026, 10, 1, tzinfo=UTC)  # 28 October
    assert retention.boundary_keeping(1, now) == dt.datetime(2026, 12, 1, tzinfo=UTC)
    assert retention.boundary_keeping(2, now) == dt.datetime(2026, 11, 1, tzinfo=UTC)  # 30 November
    with pytest.raises(ValueError, match="at least one day"):
        retention.boundary_keeping(0, now)


def _parent_statistics(engine: Engine) -> int:
    """Planner statistics rows of the partitioned parent itself (autovacuum never makes them)."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM pg_statistic WHERE starelid = 'ledger_hour'::regclass")
            ).scalar_one()
        )


@pytest.mark.postgres
def test_a_backfill_analyzes_the_partitioned_parent(pg: str, monkeypatch: pytest.MonkeyPatch) -> None:
    migrate(pg)
    engine = make_engine(pg)
    try:
        march = dt.datetime(2025, 3, 10, tzinfo=UTC)
        # a run below the threshold (a scheduler's few minutes) leaves statistics to the operator
        ingest_window(engine, "z", _OneReading(march, 120), march, march + dt.timedelta(hours=2))  # type: ignore[arg-type]
        assert _parent_statistics(engine) == 0
        # a run writing at least ANALYZE_AFTER_ROWS rows (here 2: the two hours) refreshes them
        monkeypatch.setattr(partitions, "ANALYZE_AFTER_ROWS", 2)
        ingest_window(engine, "z", _OneReading(march, 120), march, march + dt.timedelta(hours=2))  # type: ignore[arg-type]
        assert _parent_statistics(engine) > 0
    finally:
        engine.dispose()


def test_analyze_is_a_no_op_on_sqlite(tmp_path: Any) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'l.db'}")
    try:
        with engine.begin() as conn:
            assert partitions.analyze_parent(conn) is False
    finally:
        engine.dispose()
