"""heatmap(): hand-computed cells in Europe/Berlin (both DST transitions), Asia/Kolkata and UTC;
bad zones; a scoped caller; on SQLite and PostgreSQL (the ``engine`` fixture runs both)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from ledger_rows import at, row
from sqlalchemy import Engine

from service.analytics.access import ALL, Access
from service.analytics.dims import Dimension, LedgerFilter
from service.analytics.errors import InvalidArgument, MissingFxRate, UnknownCurrency
from service.analytics.heatmap import HOURS_PER_WEEK, HeatmapCell, heatmap, hour_shifts, zone_of
from service.analytics.query import LedgerQuery
from service.analytics.window import check_window
from service.models import FxRate
from service.timeutil import hour_index

D = Decimal
UTC = dt.UTC
# A busy allocated hour (half busy by SM activity) and an idle unallocated one.
HALF_BUSY = {"busy_s": 1800.0, "obs_s_sm_active": 3600.0, "busy_s_sm_active": 1800.0}
IDLE = {"idle_s": 3600.0, "hist_0_1_s": 3600.0, "obs_s_sm_active": 3600.0, "idle_s_sm_active": 3600.0}


def cells(engine: Engine, start: dt.datetime, end: dt.datetime, zone: str, **kw) -> list[HeatmapCell]:  # type: ignore[no-untyped-def]
    access = kw.pop("access", ALL)
    flt = kw.pop("flt", LedgerFilter())
    q = LedgerQuery(check_window(start, end, max_days=400), filter=flt, access=access)
    with engine.connect() as conn:
        return heatmap(conn, q, zone, **kw)


@pytest.fixture
def january(put) -> None:  # type: ignore[no-untyped-def]
    # D0 = Monday 2025-01-06 00:00 UTC; Berlin is UTC+1 in January.
    put([
        row(0, "GPU-a", "job-1", project="alpha", cost="2", idle_cost="0", **HALF_BUSY),  # Mon 01 local
        row(0, "GPU-b", cost="1", idle_cost="1", **IDLE),  # Mon 01 local, unallocated
        row(23, "GPU-a", "job-1", project="alpha", cost="2", idle_cost="0", **HALF_BUSY),  # Tue 00 local
        row(167, "GPU-b", cost="3", idle_cost="3", currency="EUR", **IDLE),  # Sun 23 UTC = Mon 00 local
    ])  # fmt: skip


def test_berlin_winter_cells_by_hand(engine: Engine, january: None) -> None:
    out = cells(engine, at(0), at(168), "Europe/Berlin")
    assert len(out) == HOURS_PER_WEEK and [c.hour_of_week for c in out] == list(range(168))
    mon00, mon01, tue00 = out[0], out[1], out[24]
    assert (mon01.weekday, mon01.hour, tue00.weekday, tue00.hour, out[167].weekday) == (1, 1, 2, 0, 7)
    # Mon 01 local: GPU-a allocated, busy 0.5 of 1 observed hour; GPU-b unallocated, idle.
    assert (mon01.gpu_hours, mon01.observed_gpu_hours, mon01.effective_gpu_hours) == (2.0, 2.0, 0.5)
    assert mon01.utilization_pct == 25.0 and mon01.allocated_pct == 50.0
    assert (mon01.idle_gpu_hours, mon01.idle_cost) == (1.0, {"USD": D(1)})
    assert (tue00.utilization_pct, tue00.allocated_pct, tue00.idle_cost) == (50.0, 100.0, {"USD": D(0)})
    assert (mon00.gpu_hours, mon00.allocated_pct, mon00.idle_cost) == (1.0, 0.0, {"EUR": D(3)})
    empty = out[2]
    assert (empty.gpu_hours, empty.utilization_pct, empty.allocated_pct, empty.idle_cost) == (
        0.0,
        None,
        None,
        {},
    )
    # The window is Mon 00:00 UTC .. +168 h = Mon 01:00 local .. Mon 01:00 local the next week.
    assert all(c.window_hours == 1 for c in out)
    assert mon01.metric == "sm_active" and empty.metric is None


def test_utc_and_a_half_hour_zone(engine: Engine, january: None) -> None:
    utc = cells(engine, at(0), at(168), "UTC")
    assert (utc[0].gpu_hours, utc[23].gpu_hours, utc[167].gpu_hours) == (2.0, 1.0, 1.0)
    # Kolkata is UTC+05:30: a UTC hour lands in the local hour it starts in (00:00 UTC = 05:30 → 05).
    kolkata = cells(engine, at(0), at(168), "Asia/Kolkata")
    assert (kolkata[5].gpu_hours, kolkata[28].gpu_hours, kolkata[4].gpu_hours) == (2.0, 1.0, 1.0)


def test_a_metric_and_a_currency(engine: Engine, january: None, put) -> None:  # type: ignore[no-untyped-def]
    put([
        FxRate(base="EUR", quote="USD", day=at(167).date(), rate=D("1.1")),
        FxRate(base="EUR", quote="USD", day=at(0).date(), rate=D("2")),  # a day with no EUR rows
    ])  # fmt: skip
    out = cells(engine, at(0), at(168), "Europe/Berlin", metric="sm_active", currency="usd")
    assert out[0].idle_cost == {"USD": D("3.300000000")} and out[1].idle_cost == {"USD": D(1)}
    assert out[1].metric == "sm_active" and out[1].utilization_pct == 25.0
    # EUR: the USD hours need USD→EUR (or EUR→USD) on their day, 2025-01-06: 1 / 2.
    eur = cells(engine, at(0), at(168), "Europe/Berlin", currency="EUR")
    assert eur[1].idle_cost == {"EUR": D("0.500000000")} and eur[0].idle_cost == {"EUR": D(3)}


def test_currency_errors(engine: Engine, january: None) -> None:
    with pytest.raises(MissingFxRate, match=r"EUR/USD .*2025-01-12"):
        cells(engine, at(0), at(168), "UTC", currency="USD")
    for bad in ("usd'; drop table fx_rate; --", "ZZZ", "", "€"):
        with pytest.raises(UnknownCurrency):
            cells(engine, at(0), at(168), "UTC", currency=bad)


def test_berlin_dst_hours_that_occur_twice_or_never(engine: Engine, put) -> None:  # type: ignore[no-untyped-def]
    spring = dt.datetime(2025, 3, 30, tzinfo=UTC)  # 01:00 UTC: 02:00 CET → 03:00 CEST
    autumn = dt.datetime(2025, 10, 26, tzinfo=UTC)  # 01:00 UTC: 03:00 CEST → 02:00 CET
    hours = [spring, spring + dt.timedelta(hours=1), autumn, autumn + dt.timedelta(hours=1)]
    put([row(hour_index(h) - hour_index(at(0)), "GPU-a", cost="1", idle_cost="1", **IDLE) for h in hours])
    sunday = 6 * 24
    # Spring week, Mon 00:00 local .. +168 UTC hours (one local hour, Sun 02, never occurs).
    week = dt.datetime(2025, 3, 23, 23, tzinfo=UTC)
    out = cells(engine, week, week + dt.timedelta(hours=168), "Europe/Berlin")
    assert out[sunday + 2].window_hours == 0 and out[sunday + 2].gpu_hours == 0.0
    assert (out[sunday + 1].gpu_hours, out[sunday + 3].gpu_hours) == (1.0, 1.0)
    # 167 window hours land in Mon 00 .. Sun 23 local, less Sun 02; the 168th is Mon 00 again.
    assert [c.window_hours for c in out].count(1) == 166 and out[0].window_hours == 2
    # Autumn week: Sun 02 local occurs twice; both UTC hours land in it.
    week = dt.datetime(2025, 10, 19, 22, tzinfo=UTC)
    out = cells(engine, week, week + dt.timedelta(hours=168), "Europe/Berlin")
    assert (out[sunday + 2].window_hours, out[sunday + 2].gpu_hours, out[sunday + 2].idle_cost) == (
        2,
        2.0,
        {"USD": D(2)},
    )
    assert out[167].window_hours == 0  # the window ends at Sun 23:00 CET
    assert sum(c.window_hours for c in out) == 168


def test_hour_shifts_segments() -> None:
    start = hour_index(dt.datetime(2025, 3, 30, tzinfo=UTC))
    assert hour_shifts(ZoneInfo("Europe/Berlin"), start, start + 3) == [(start, 1), (start + 1, 2)]
    assert hour_shifts(ZoneInfo("America/St_Johns"), start, start + 1) == [(start, -3)]  # −02:30 → −3
    assert hour_shifts(ZoneInfo("UTC"), start, start + 1000) == [(start, 0)]


@pytest.mark.parametrize(
    "name",
    [
        "Mars/Olympus",
        "",
        "   ",
        "../../etc/passwd",
        "/etc/localtime",
        "Europe/Berlin\x00",
        "x" * 10_000,
        "Europe//Berlin",
    ],
)
def test_bad_zones_are_refused(name: str) -> None:
    with pytest.raises(InvalidArgument, match="timeZone") as err:
        zone_of(name)
    assert len(err.value.message) < 200  # a 10 KB name is not echoed back whole


def test_a_scoped_caller_sees_only_its_rows(engine: Engine, january: None) -> None:
    alpha = cells(engine, at(0), at(168), "Europe/Berlin", access=Access(projects=frozenset({"alpha"})))
    assert (alpha[1].gpu_hours, alpha[1].idle_cost, alpha[0].gpu_hours) == (1.0, {"USD": D(0)}, 0.0)
    nobody = cells(engine, at(0), at(168), "Europe/Berlin", access=Access(projects=frozenset({"gamma"})))
    assert sum(c.gpu_hours for c in nobody) == 0.0
    # A filter on a device-level dimension reads ledger_hour; the same cells.
    device = cells(engine, at(0), at(168), "Europe/Berlin", flt=LedgerFilter({Dimension.DEVICE: ["GPU-b"]}))
    assert (device[1].gpu_hours, device[0].gpu_hours, device[24].gpu_hours) == (1.0, 1.0, 0.0)
