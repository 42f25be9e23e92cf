"""Property: after any ingests and re-ingests, every group rollup row is the GROUP BY of ledger_hour.

Random samples of three devices (a whole on-prem GPU, an AWS GPU priced in EUR, a GCP MIG
instance priced in USD; workloads with and without projects, unallocated time) are ingested over a
window crossing midnight, then random sub-windows are re-ingested with other samples (late data).
After each, ``ledger_group_hour`` and ``ledger_group_day`` must equal the grouping of
``ledger_hour`` computed here in Python: the same groups, counts and money exactly (Decimal), the
same maxima, and the float sums to 1e-9 relative (the database adds them in another order).
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal
from typing import Any, ClassVar, Literal

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select
from sqlmodel import Session

from connectors.base import SAMPLE_SCHEMA, ConnectorConfig, DeviceInfo, SampleBatch, Sampling, WorkloadInfo
from service.db import make_engine
from service.ledger.ingest import ingest_window
from service.ledger.rollups import GROUP_KEYS, MAXED, SUMMED
from service.models import GpuRate, LedgerDay, LedgerGroupDay, LedgerGroupHour, LedgerHour, LedgerHourSegment

H = 3_600_000
DAY0 = dt.datetime(2026, 3, 1, 20, tzinfo=dt.UTC)  # the window crosses midnight (and nothing else)
T0 = int(DAY0.timestamp() * 1000)
SPAN_H = 8
DEVICES = [
    DeviceInfo("GPU-a", "onprem", gpu_model="H200", node="n1"),
    DeviceInfo(
        "GPU-b", "aws", provider="aws", instance_type="p5.48xlarge", gpu_model="H100", region="us-east-1"
    ),
    DeviceInfo(
        "MIG-c", "gcp", provider="gcp", gpu_model="A100", mig_profile="3g.40gb", gpu_fraction=3 / 7,
        parent_device_id="GPU-p",
    ),
]  # fmt: skip
WORKLOADS = [
    WorkloadInfo("job-1", project="alpha", team="t1", user_name="ann"),
    WorkloadInfo("job-2", project="beta", namespace="ml"),
    WorkloadInfo("job-3"),  # allocated, but no project or team (NULL dimensions)
]


class _Replay:
    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = ConnectorConfig
    sampling = Sampling(period_s=60, max_gap_s=120, presence_gap_s=1800)

    def __init__(self, samples: pl.DataFrame) -> None:
        self.samples = samples

    def discover(self) -> list[DeviceInfo]:
        return DEVICES

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        lo, hi = int(start.timestamp() * 1000), int(end.timestamp() * 1000)
        inside = self.samples.filter((pl.col("ts_ms") >= lo) & (pl.col("ts_ms") < hi))
        yield SampleBatch(inside, DEVICES, WORKLOADS)


_OWNERS = st.sampled_from(["", "job-1", "job-2", "job-3"])
samples_strategy = st.tuples(_OWNERS, _OWNERS, _OWNERS).flatmap(
    lambda owners: st.lists(
        st.tuples(
            st.sampled_from([0, 1, 2]),
            st.integers(min_value=0, max_value=SPAN_H * H - 1).map(lambda ms: T0 + ms // 60_000 * 60_000),
            st.sampled_from(["gpu_util", "sm_active", "energy_j", "power_w", "mem_used_b", "temp_c"]),
            st.floats(min_value=0, max_value=100, allow_nan=False),
            st.booleans(),
        ).map(
            lambda t: (
                DEVICES[t[0]].device_id,
                t[1],
                t[2],
                t[3],
                owners[t[0]] if t[4] else "",  # owners change between readings
                1.0,
            )
        ),
        min_size=1,
        max_size=120,
    )
)


def _unique_by_reading(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """One owner per (device, ts): a reading names the same owner in every metric."""
    owner: dict[tuple[str, int], str] = {}
    out = []
    for device, ts, metric, value, wl, share in rows:
        wl = owner.setdefault((device, ts), wl)
        out.append((device, ts, metric, value, wl, share))
    return out


def _frame(rows: list[tuple[Any, ...]]) -> pl.DataFrame:
    return pl.DataFrame(_unique_by_reading(rows), schema=SAMPLE_SCHEMA, orient="row")


def _group(rows: list[dict[str, Any]], time_keys: tuple[str, ...]) -> dict[tuple[Any, ...], dict[str, Any]]:
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        key = (*(r[k] for k in GROUP_KEYS), r["workload_key"] == "", *(r[k] for k in time_keys))
        groups[key].append(r)
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key, members in groups.items():
        agg: dict[str, Any] = {"hour_rows": len(members)}
        for name in SUMMED:
            values = [m[name] for m in members if m[name] is not None]
            if not values:
                agg[name] = None
            elif isinstance(values[0], Decimal):
                agg[name] = sum(values, Decimal(0))
            else:
                agg[name] = math.fsum(values)
        for name in MAXED:
            values = [m[name] for m in members if m[name] is not None]
            agg[name] = max(values) if values else None
        agg["energy_estimated"] = any(m["energy_estimated"] for m in members)
        out[key] = agg
    return out


def _stored(engine: Engine, table: Any, time_keys: tuple[str, ...]) -> dict[tuple[Any, ...], dict[str, Any]]:
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(select(table))]
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        key = (*(r[k] for k in GROUP_KEYS), bool(r["unallocated"]), *(r[k] for k in time_keys))
        assert key not in out, f"two rollup rows for one group: {key}"
        out[key] = r
    return out


def assert_rollups_exact(engine: Engine) -> None:
    with engine.connect() as conn:
        hours = [dict(r._mapping) for r in conn.execute(select(table_of_hour()))]
    for table, time_keys in (
        (LedgerGroupHour.__table__, ("hour_index", "day_index", "month_index")),
        (LedgerGroupDay.__table__, ("day_index", "month_index")),
    ):
        expected = _group(hours, time_keys)
        stored = _stored(engine, table, time_keys)
        assert set(stored) == set(expected), table.name
        for key, want in expected.items():
            got = stored[key]
            for name, value in want.items():
                if isinstance(value, float):
                    assert math.isclose(got[name], value, rel_tol=1e-9, abs_tol=1e-9), (table.name, key, name)
                else:
                    assert got[name] == value, (table.name, key, name, got[name], value)


def table_of_hour() -> Any:
    return LedgerHour.__table__


def _reset(engine: Engine) -> None:
    with engine.begin() as conn:
        for model in (LedgerHour, LedgerDay, LedgerGroupHour, LedgerGroupDay, LedgerHourSegment, GpuRate):
            conn.execute(model.__table__.delete())  # type: ignore[attr-defined]
    with Session(engine) as session:
        since = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        session.add_all(
            [
                GpuRate(source_kind="rate_card", source_ref="eu", environment="aws", valid_from=since,
                        effective_per_gpu_hour=Decimal("3.333333333"), currency="EUR"),
                GpuRate(source_kind="rate_card", source_ref="us", environment="gcp", valid_from=since,
                        effective_per_gpu_hour=Decimal("2.718281828"), currency="USD"),
            ]
        )  # fmt: skip
        session.commit()


windows = st.tuples(st.integers(0, SPAN_H - 1), st.integers(1, SPAN_H)).map(
    lambda t: (min(t), max(t[0] + 1, t[1]))
)


def _run(url: str, first: list[Any], later: list[tuple[tuple[int, int], list[Any]]]) -> None:
    engine = make_engine(url)
    try:
        _reset(engine)
        ingest_window(engine, "replay", _Replay(_frame(first)), DAY0, DAY0 + dt.timedelta(hours=SPAN_H))
        assert_rollups_exact(engine)
        for (lo, hi), rows in later:
            start, end = DAY0 + dt.timedelta(hours=lo), DAY0 + dt.timedelta(hours=hi)
            ingest_window(engine, "replay", _Replay(_frame(rows)), start, end)
            assert_rollups_exact(engine)
        # the same days rebuilt by one call (one statement per table over the range)
        from service.ledger import store

        first_day = int(DAY0.timestamp()) // 86_400
        with engine.begin() as conn:
            store.rebuild_days(conn, first_day, first_day + 1)
        assert_rollups_exact(engine)
    finally:
        engine.dispose()


def test_rollups_of_a_fixed_history_hold_both_currencies(sqlite_url: str) -> None:
    """The property is not vacuous: with every device read, both prices reach the day rollup."""
    readings = [
        (device.device_id, T0 + m * 60_000, metric, 40.0, ("job-1", "job-2", "")[m % 3], 1.0)
        for device in DEVICES
        for m in range(0, SPAN_H * 60, 7)
        for metric in ("gpu_util", "sm_active")
    ]
    _run(sqlite_url, readings, [((2, 5), readings[::2])])
    engine = make_engine(sqlite_url)
    try:
        with engine.connect() as conn:
            day = LedgerGroupDay.__table__
            totals = dict(
                conn.execute(
                    select(day.c.currency, day.c.cost).where(
                        day.c.cost.is_not(None), day.c.day_index == 20513
                    )
                ).all()
            )
    finally:
        engine.dispose()
    assert set(totals) == {"EUR", "USD"}


@pytest.mark.slow
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(first=samples_strategy, later=st.lists(st.tuples(windows, samples_strategy), max_size=2))
def test_rollups_equal_group_by_of_hours_sqlite(sqlite_url: str, first: list, later: list) -> None:
    _run(sqlite_url, first, later)


@pytest.mark.slow
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(first=samples_strategy, later=st.lists(st.tuples(windows, samples_strategy), max_size=2))
def test_rollups_equal_group_by_of_hours_postgres(pg_url: str, first: list, later: list) -> None:
    _run(pg_url, first, later)


# --- many days rebuilt at once --------------------------------------------------------------------

RANGE_START = dt.datetime(2026, 3, 30, 18, tzinfo=dt.UTC)  # four UTC days, across a month's end
RANGE_END = dt.datetime(2026, 4, 2, 6, tzinfo=dt.UTC)
RANGE_DAYS = (int(RANGE_START.timestamp()) // 86_400, int(RANGE_END.timestamp() - 1) // 86_400)


def _range_readings() -> list[tuple[Any, ...]]:
    """Every device read every 11 minutes over the range; owners change every ~6 hours (jobs with
    and without a project, unallocated time); utilization follows the minute."""
    t0 = int(RANGE_START.timestamp() * 1000)
    minutes = int((RANGE_END - RANGE_START).total_seconds()) // 60
    owners = ("job-1", "job-2", "", "job-3")
    return [
        (d.device_id, t0 + m * 60_000, metric, float((m * 7 + i * 13) % 101), owners[(m // 370 + i) % 4], 1.0)
        for i, d in enumerate(DEVICES)
        for m in range(0, minutes, 11)
        for metric in ("gpu_util", "sm_active", "power_w")
    ]


def _rollup_snapshot(engine: Engine) -> dict[str, list[dict[str, Any]]]:
    """Every rollup row (less its id) and every day segment's rows, in a stable order."""
    from service.ledger import segments

    out: dict[str, list[dict[str, Any]]] = {}
    with engine.connect() as conn:
        for model in (LedgerDay, LedgerGroupHour, LedgerGroupDay):
            table = model.__table__  # type: ignore[attr-defined]
            rows = [{k: v for k, v in r._mapping.items() if k != "id"} for r in conn.execute(select(table))]
            out[table.name] = sorted(rows, key=repr)
        stored = conn.execute(select(segments.SEGMENT.c.day_index, segments.SEGMENT.c.arrow)).all()
        out["segments"] = [
            {"day": int(day), "rows": segments.decode(bytes(data)).to_dicts()} for day, data in sorted(stored)
        ]
    return out


def _assert_same(got: dict[str, list[dict[str, Any]]], want: dict[str, list[dict[str, Any]]]) -> None:
    assert got.keys() == want.keys()
    for name in want:
        assert len(got[name]) == len(want[name]), name
        for g, w in zip(got[name], want[name], strict=True):
            assert g.keys() == w.keys(), name
            for column, value in w.items():
                if isinstance(value, float):
                    assert math.isclose(g[column], value, rel_tol=1e-12, abs_tol=1e-9), (name, column)
                else:
                    assert g[column] == value, (name, column, g[column], value)


@pytest.mark.parametrize("url_fixture", ["sqlite_url", pytest.param("pg_url", marks=pytest.mark.postgres)])
def test_one_rebuild_of_many_days_equals_the_ingests_day_by_day(
    url_fixture: str, request: pytest.FixtureRequest
) -> None:
    """``rebuild_days`` over four days (two months' partitions on PostgreSQL), from emptied
    rollups, writes exactly what the ingest's day chunks wrote — ``ledger_day``, both group
    rollups and the day segments — and the group rollups still equal the grouping of the hours."""
    from service.ledger import store

    engine = make_engine(request.getfixturevalue(url_fixture))
    try:
        _reset(engine)
        ingest_window(engine, "replay", _Replay(_frame(_range_readings())), RANGE_START, RANGE_END)
        assert_rollups_exact(engine)
        by_day = _rollup_snapshot(engine)
        assert len(by_day["segments"]) == 4 and len({r["month_index"] for r in by_day["ledger_day"]}) == 2
        assert {r["currency"] for r in by_day["ledger_group_day"]} == {"EUR", "USD", None}
        with engine.begin() as conn:
            for model in (LedgerDay, LedgerGroupHour, LedgerGroupDay, LedgerHourSegment):
                conn.execute(model.__table__.delete())  # type: ignore[attr-defined]
        with engine.begin() as conn:
            store.rebuild_days(conn, *RANGE_DAYS)
        _assert_same(_rollup_snapshot(engine), by_day)
        assert_rollups_exact(engine)
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_rebuild_groups_fresh_hours_by_hashing_and_restores_enable_sort(pg_url: str) -> None:
    """Hours just written have no statistics: inside ``hash_grouping`` the group rollup's plan is
    a hash aggregate with no sort (the planner's guess of 2 rows chose an on-disk sort of the
    wide rows); ``enable_sort`` is back to the caller's value after ``rebuild_days``."""
    from sqlalchemy import text

    from service.ledger import rollups, store

    engine = make_engine(pg_url)
    try:
        _reset(engine)
        ingest_window(engine, "replay", _Replay(_frame(_range_readings())), RANGE_START, RANGE_END)
        hourly = rollups.hourly_select(*RANGE_DAYS).compile(
            dialect=engine.dialect, compile_kwargs={"literal_binds": True}
        )
        with engine.begin() as conn:
            with rollups.hash_grouping(conn):
                plan = "\n".join(r[0] for r in conn.execute(text(f"EXPLAIN {hourly}")))
            assert conn.execute(text("SHOW enable_sort")).scalar() == "on"
        assert "HashAggregate" in plan and "Sort" not in plan, plan
        for caller in ("on", "off"):
            with engine.begin() as conn:
                conn.execute(text(f"SET LOCAL enable_sort = {caller}"))
                store.rebuild_days(conn, *RANGE_DAYS)
                assert conn.execute(text("SHOW enable_sort")).scalar() == caller
                assert conn.execute(text("SHOW work_mem")).scalar() == rollups.REBUILD_WORK_MEM
    finally:
        engine.dispose()
