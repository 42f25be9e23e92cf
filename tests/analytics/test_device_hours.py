"""usage(HOUR, [DEVICE]) from the day segments equals the grouped SQL over ledger_hour.

Hand-computed cases (two workloads in one MIG hour folded, energy null unless measured, scopes,
filters, pages), then a property: for random ledger rows, random scopes, filters and page sizes,
the segment path gives the rows of the SQL path (``rollup=False`` forces it) in the same order,
and its pages concatenate to its unpaged answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_rows import at, rebuild_days, row
from sqlalchemy import Engine, delete, event, select, update
from sqlmodel import Session

from service.analytics import device_hours
from service.analytics.access import ALL, Access
from service.analytics.columnar import usage_frame
from service.analytics.dims import Dimension, Granularity, LedgerFilter
from service.analytics.paging import Page, ResultTooLarge
from service.analytics.query import LedgerQuery
from service.analytics.usage import UsageRow, usage
from service.analytics.window import check_window, pruned_hours_refused
from service.ledger import segments, store
from service.models import LedgerHour, LedgerHourSegment

MIG = 1 / 7
DEVICE = (Dimension.DEVICE,)


def q(start: float = 0, end: float = 48, **kw: Any) -> LedgerQuery:
    kw.setdefault("access", ALL)
    return LedgerQuery(check_window(at(start), at(end), max_days=400), Granularity.HOUR, DEVICE, **kw)


def sql(query: LedgerQuery) -> LedgerQuery:
    return LedgerQuery(
        query.window, query.granularity, query.group_by, query.filter, rollup=False, access=query.access
    )


@pytest.fixture
def fleet(put: Callable[[Iterable[Any]], None]) -> None:
    put(
        [
            # GPU-a, hour 0: one workload, energy measured
            row(0, "GPU-a", "job-1", project="alpha", team="t1", busy_s=900.0, idle_s=600.0, energy_j=7.2e6),
            # GPU-a, hour 1: nobody, half observed
            row(1, "GPU-a", observed_s=1800.0, idle_s=1800.0),
            # MIG-m (1/7), hour 0: two workloads share the hour, one with energy
            row(0, "MIG-m", "job-2", project="beta", gpu_fraction=MIG, present_s=1200.0,
                observed_s=1200.0, busy_s=600.0, default_metric="gpu_util", energy_j=3.6e5),
            row(0, "MIG-m", "job-3", project="alpha", gpu_fraction=MIG, present_s=2400.0,
                observed_s=1800.0, busy_s=1800.0),
            # next day, hour 25 (the window crosses midnight)
            row(25, "GPU-b", "job-1", project="alpha", team="t2", environment="aws", busy_s=3600.0),
        ]
    )  # fmt: skip


def test_hand_computed_hours_fold_workloads_of_one_device_hour(engine: Engine, fleet: None) -> None:
    with engine.connect() as conn:
        rows = usage(conn, q())
    got = {(r.key.period_start, r.key.value(Dimension.DEVICE)): r for r in rows}
    assert [k for k in got] == [
        (at(0), "GPU-a"),
        (at(0), "MIG-m"),
        (at(1), "GPU-a"),
        (at(25), "GPU-b"),
    ]
    a0 = got[at(0), "GPU-a"]
    assert (a0.gpu_hours, a0.observed_gpu_hours, a0.effective_gpu_hours, a0.idle_gpu_hours) == (
        1.0,
        1.0,
        0.25,
        600 / 3600,
    )
    assert a0.energy_kwh == 2.0 and a0.metric == "sm_active" and a0.utilization_pct == 25.0
    m0 = got[at(0), "MIG-m"]  # 1200 s + 2400 s present, 1200 + 1800 observed, 600 + 1800 busy, × 1/7
    assert m0.gpu_hours == pytest.approx(1.0 * MIG, rel=1e-15)
    assert m0.observed_gpu_hours == pytest.approx(3000 / 3600 * MIG, rel=1e-15)
    assert m0.effective_gpu_hours == pytest.approx(2400 / 3600 * MIG, rel=1e-15)
    assert m0.utilization_pct == pytest.approx(80.0)
    assert m0.energy_kwh == pytest.approx(0.1)  # the one measured row; the other's NULL is no 0
    assert m0.metric == "sm_active_else_gpu_util"  # two default metrics in one device-hour
    a1 = got[at(1), "GPU-a"]
    assert a1.energy_kwh is None and a1.coverage_pct == 50.0 and a1.idle_gpu_hours == 0.5


def test_segments_serve_and_equal_sql_exactly_where_one_row_per_device_hour(
    engine: Engine, fleet: None
) -> None:
    with engine.connect() as conn:
        fast = device_hours.usage_frame(conn, q(), ("observed_s", "busy_s", "idle_s"), Page())
        assert fast is not None and fast.height == 4
        ours, theirs = usage(conn, q()), usage(conn, sql(q()))
    assert [r.key for r in ours] == [r.key for r in theirs]
    for a, b in zip(ours, theirs, strict=True):
        if a.key.value(Dimension.DEVICE) != "MIG-m":  # one ledger row: the very same doubles
            assert a == b
        else:
            assert_close(a, b)


def test_scope_filter_window_and_metric(engine: Engine, fleet: None) -> None:
    cases = [
        q(access=Access(projects=frozenset({"alpha"}))),
        q(access=Access(teams=frozenset({"t2"}))),
        q(access=Access(projects=frozenset({"beta"}), teams=frozenset({"t1"}))),
        q(access=Access()),
        q(filter=LedgerFilter({Dimension.ENVIRONMENT: ["onprem"]})),
        q(filter=LedgerFilter(unallocated=True)),
        q(filter=LedgerFilter({Dimension.PROJECT: ["alpha"]}, unallocated=False)),
        q(1, 26),
        q(26, 30),
    ]
    with engine.connect() as conn:
        for query in cases:
            for metric in (None, "gpu_util", "sm_active"):
                ours, theirs = usage(conn, query, metric), usage(conn, sql(query), metric)
                assert [r.key for r in ours] == [r.key for r in theirs], query
                for a, b in zip(ours, theirs, strict=True):
                    assert_close(a, b)
    with engine.connect() as conn:
        [m0] = usage(conn, q(access=Access(projects=frozenset({"beta"}))))
    assert m0.gpu_hours == pytest.approx(1200 / 3600 * MIG) and m0.metric == "gpu_util"


def test_pages_continue_after_the_cursor_and_the_cap_refuses(engine: Engine, fleet: None) -> None:
    with engine.connect() as conn:
        whole = usage(conn, q())
        pages: list[UsageRow] = []
        after = None
        while True:
            page = Page("usage", first=1, after=after)
            got = usage(conn, q(), page=page)
            pages += got
            if len(got) < 1:
                break
            after = got[-1].key.order
        assert pages == whole
        with pytest.raises(ResultTooLarge):
            usage(conn, q(), page=Page("usage", max_rows=3))
        assert len(usage(conn, q(), page=Page("usage", max_rows=4))) == 4
        frame = usage_frame(conn, q(), page=Page("usage", first=2, after=whole[0].key.order))
    assert frame["device"].to_list() == ["MIG-m", "GPU-a"]


def test_a_day_without_its_segment_is_read_in_sql(engine: Engine, fleet: None) -> None:
    with engine.begin() as conn:
        day = int(at(25).timestamp()) // 86400
        conn.execute(delete(LedgerHourSegment).where(LedgerHourSegment.day_index == day))
    with engine.connect() as conn:
        assert device_hours.usage_frame(conn, q(), ("observed_s", "busy_s", "idle_s"), Page()) is None
        assert [r.key for r in usage(conn, q())] == [r.key for r in usage(conn, sql(q()))]
        # the first day alone is still covered
        assert (
            device_hours.usage_frame(conn, q(0, 24), ("observed_s", "busy_s", "idle_s"), Page()) is not None
        )


def test_segments_hold_the_rows_of_their_day_in_order(engine: Engine, fleet: None) -> None:
    with engine.connect() as conn:
        stored = conn.execute(select(LedgerHourSegment.day_index, LedgerHourSegment.arrow)).all()
        hours = conn.execute(select(LedgerHour.day_index)).scalars().all()
    assert sorted(day for day, _ in stored) == sorted(set(hours))
    for day, data in stored:
        frame = segments.decode(bytes(data))
        assert list(frame.columns) == list(segments.SCHEMA)
        for name, dtype in segments.SCHEMA.items():
            stored_type = frame.schema[name]
            if name in segments.TEXT_COLUMNS:
                # format 2: text as a dictionary of the day's values (+ the mixed label), sorted
                assert isinstance(stored_type, pl.Enum), name
                values = set(frame[name].drop_nulls().cast(pl.String).to_list())
                if name == "default_metric":
                    values |= set(segments.EXTRA_METRIC_LABELS)
                assert stored_type.categories.to_list() == sorted(values), name
            else:
                assert stored_type == dtype, name
        assert frame.height == hours.count(day)
        keys = frame.select("hour_index", pl.col("device_id").cast(pl.String)).rows()
        assert keys == sorted(keys)


def assert_close(a: UsageRow, b: UsageRow) -> None:
    assert a.key == b.key and a.metric == b.metric
    for name in ("gpu_hours", "observed_gpu_hours", "effective_gpu_hours", "idle_gpu_hours", "energy_kwh"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x == pytest.approx(y, rel=1e-12, abs=1e-12), name


# --- the property ------------------------------------------------------------------------------------

DEVICES = ["GPU-a", "GPU-b", "MIG-c", "gpu-é"]
WORKLOADS = [("", None, None), ("job-1", "alpha", "t1"), ("job-2", "beta", None), ("job-3", None, "t2")]


#: Shares of an hour. PostgreSQL refuses FLOAT arithmetic that underflows (2e-321 × 3/7, or 5e-324
#: J ÷ 3.6e6 for kWh) where SQLite and NumPy give a subnormal: no drawn value is so small (energy
#: below).
FRACTIONS = st.just(0.0) | st.floats(1e-9, 1)


@st.composite
def ledgers(draw: st.DrawFn) -> list[LedgerHour]:
    rows = []
    for h in draw(st.lists(st.integers(0, 60), min_size=0, max_size=12, unique=True)):
        for device in draw(st.lists(st.sampled_from(DEVICES), min_size=1, max_size=4, unique=True)):
            held = draw(st.lists(st.sampled_from(WORKLOADS), min_size=1, max_size=3, unique=True))
            for key, project, team in held:
                present = draw(st.floats(1, 3600, allow_nan=False))
                observed = draw(FRACTIONS) * present
                busy = draw(FRACTIONS) * observed
                rows.append(
                    row(
                        h,
                        device,
                        key,
                        project=project,
                        team=team,
                        environment="aws" if device == "GPU-b" else "onprem",
                        gpu_fraction=3 / 7 if device.startswith("MIG") else 1.0,
                        default_metric=draw(st.sampled_from(["sm_active", "gpu_util"])),
                        present_s=present,
                        observed_s=observed,
                        busy_s=busy,
                        idle_s=observed - busy,
                        obs_s_gpu_util=observed,
                        busy_s_gpu_util=busy,
                        energy_j=draw(st.none() | st.just(0.0) | st.floats(1e-3, 1e7)),
                    )
                )
    return rows


ACCESS = st.sampled_from(
    [ALL, Access(projects=frozenset({"alpha"})), Access(teams=frozenset({"t2"})), Access()]
)
FILTERS = st.sampled_from(
    [
        LedgerFilter(),
        LedgerFilter(unallocated=False),
        LedgerFilter({Dimension.ENVIRONMENT: ["onprem"]}),
        LedgerFilter({Dimension.DEVICE: ["GPU-a", "gpu-é"]}, unallocated=True),
    ]
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=ledgers(),
    access=ACCESS,
    flt=FILTERS,
    span=st.tuples(st.integers(0, 60), st.integers(1, 62)),
    first=st.integers(1, 7),
    metric=st.sampled_from([None, "gpu_util"]),
)
def test_property_segments_equal_sql_and_pages_concatenate(  # noqa: PLR0913, PLR0917
    engine: Engine,
    rows: list[LedgerHour],
    access: Access,
    flt: LedgerFilter,
    span: tuple[int, int],
    first: int,
    metric: str | None,
) -> None:
    first_day = int(at(0).timestamp()) // 86400
    with engine.begin() as conn:  # the last example's hours gone, and every rollup of their days
        conn.execute(delete(LedgerHour))
        store.rebuild_days(conn, first_day, first_day + 3)
    with Session(engine) as session:
        session.add_all(rows)
        session.commit()
    rebuild_days(engine)
    start, end = min(span), max(span[0] + 1, span[1])
    query = q(start, end, filter=flt, access=access)
    with engine.connect() as conn:
        fast = device_hours.usage_frame(conn, query, ("observed_s", "busy_s", "idle_s"), Page())
        assert fast is not None or not rows  # every day with hours has its segment
        ours, theirs = usage(conn, query, metric), usage(conn, sql(query), metric)
        assert [r.key for r in ours] == [r.key for r in theirs]
        for a, b in zip(ours, theirs, strict=True):
            assert_close(a, b)
        pages: list[UsageRow] = []
        after = None
        for _ in range(len(ours) + 2):
            got = usage(conn, query, metric, page=Page("usage", first=first, after=after))
            pages += got
            if len(got) < first:
                break
            after = got[-1].key.order
        assert pages == ours
        frame = usage_frame(conn, query, metric)
    assert frame["device"].to_list() == [r.key.value(Dimension.DEVICE) for r in ours]
    assert frame["gpu_hours"].to_list() == [r.gpu_hours for r in ours]


def test_an_empty_window_reads_no_segment(engine: Engine) -> None:
    with engine.connect() as conn:
        assert usage(conn, q()) == []
        frame = usage_frame(conn, q())
    assert frame.height == 0 and frame.columns[:2] == ["period_start", "device"]


def test_coverage_counts_the_kept_days_in_one_statement(engine: Engine, fleet: None) -> None:
    """{day: rows} of the days from the first kept hour on, from one statement; None when a
    segment's count differs from the rollup's."""
    d0 = int(at(0).timestamp()) // 86400
    seen: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    with engine.connect() as conn:
        assert segments.coverage(conn, d0, d0 + 1, None) == {d0: 4, d0 + 1: 1}
        assert seen and len(seen) == 1
        assert segments.coverage(conn, d0, d0 + 1, (d0 + 1) * 24) == {d0 + 1: 1}  # day 0 pruned
        assert segments.coverage(conn, d0, d0 + 1, (d0 + 2) * 24) == {}
        assert segments.coverage(conn, d0 - 3, d0 + 9, None) == {d0: 4, d0 + 1: 1}
    with engine.begin() as conn:
        conn.execute(update(LedgerHourSegment).where(LedgerHourSegment.day_index == d0).values(hour_rows=3))
    with engine.connect() as conn:
        assert segments.coverage(conn, d0, d0 + 1, None) is None
        assert segments.coverage(conn, d0 + 1, d0 + 1, None) == {d0 + 1: 1}


def test_a_page_asks_the_collation_once_a_connection_and_the_boundary_once_a_request(
    engine: Engine, fleet: None
) -> None:
    """Per request (``pruned_hours_refused``, as the API serves one): the prune boundary once (the
    lookup check_hours_kept made, coverage reuses it), the coverage in one statement; the
    database's collation once per database connection."""
    seen: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    cols = ("observed_s", "busy_s", "idle_s")
    with engine.connect() as conn:
        for n in range(2):
            seen.clear()
            with pruned_hours_refused(conn):
                frame = device_hours.usage_frame(conn, q(), cols, Page("usage", first=2))
            assert frame is not None and frame.height == 2
            seen = [s for s in seen if "ledger_hour_segment.arrow" not in s]  # the days' segments
            asked = ["datcollate" in s for s in seen], ["ledger_retention" in s for s in seen]
            collation = 1 if n == 0 and engine.dialect.name == "postgresql" else 0
            assert (sum(asked[0]), sum(asked[1])) == (collation, 1), seen
            assert len(seen) == collation + 2, seen  # the boundary, the coverage
