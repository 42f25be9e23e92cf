"""heatmap() adds up to usage() and idle_waste() of the same window, filter, metric and threshold —
over a DST change, with MIG fractions, two currencies, unpriced and unallocated time — on SQLite and
PostgreSQL, through the group rollups and through ledger_hour; and a hypothesis walk (SQLite) over
zones, windows and metrics (both databases: the fleet is written once per database)."""

from __future__ import annotations

import datetime as dt
import random
from collections import defaultdict
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_rows import row
from sqlalchemy import Engine

from service.analytics.access import ALL, Access
from service.analytics.cost import cost
from service.analytics.dims import NO_FILTER, Dimension, LedgerFilter
from service.analytics.heatmap import heatmap
from service.analytics.idle import idle_waste
from service.analytics.query import LedgerQuery
from service.analytics.usage import usage
from service.analytics.window import check_window
from service.models import FxRate
from service.timeutil import hour_index

UTC = dt.UTC
# The week of Berlin's autumn change (2025-10-26 01:00 UTC) and a day on each side.
START = dt.datetime(2025, 10, 24, tzinfo=UTC)
HOURS = 96
EDGES = {"hist_0_1_s": 0.0, "hist_1_5_s": 0.0, "hist_5_10_s": 0.0, "hist_10_25_s": 0.0}


def _ledger() -> list[Any]:
    """A seeded random ledger: 5 devices (one a 1g MIG instance), 3 projects, EUR and USD sites,
    unpriced hours, unallocated hours; seconds in whole minutes so sums are exact in binary."""
    rnd = random.Random(15)
    base = hour_index(dt.datetime(2025, 1, 6, tzinfo=UTC))  # ledger_rows' D0
    devices = [
        ("GPU-1", {"environment": "onprem", "currency": "EUR", "gpu_fraction": 1.0}),
        ("GPU-2", {"environment": "onprem", "currency": "EUR", "gpu_fraction": 1.0}),
        ("MIG-3", {"environment": "onprem", "currency": "EUR", "gpu_fraction": 1 / 7}),
        ("GPU-4", {"environment": "aws", "currency": "USD", "gpu_fraction": 1.0}),
        (
            "GPU-5",
            {"environment": "aws", "currency": "USD", "gpu_fraction": 1.0, "default_metric": "gpu_util"},
        ),
    ]
    rows: list[Any] = []
    for h in range(hour_index(START), hour_index(START) + HOURS):
        for device, facts in devices:
            if rnd.random() < 0.2:
                continue
            project = rnd.choice(["alpha", "beta", "gamma", None])
            observed = 60.0 * rnd.randint(0, 60)
            busy = 60.0 * rnd.randint(0, int(observed // 60))
            idle = 60.0 * rnd.randint(0, int((observed - busy) // 60))
            low = 60.0 * rnd.randint(0, int(idle // 60))
            priced = rnd.random() < 0.9
            cost_n = rnd.randint(0, 5_000_000_000)
            idle_n = rnd.randint(0, cost_n)
            values = {
                **facts,
                "observed_s": observed, "busy_s": busy, "idle_s": idle, **EDGES, "hist_0_1_s": low,
                "hist_1_5_s": idle - low, "obs_s_sm_active": observed, "busy_s_sm_active": busy,
                "idle_s_sm_active": idle, "project": project, "team": project and "t-" + project,
                "cost": Decimal(cost_n).scaleb(-9) if priced else None,
                "idle_cost": Decimal(idle_n).scaleb(-9) if priced else None,
                "currency": facts["currency"] if priced else None,
            }  # fmt: skip
            rows.append(row(h - base, device, f"job-{project}" if project else "", **values))
    day = START.date()
    for i in range(5):
        rows.append(
            FxRate(base="EUR", quote="USD", day=day + dt.timedelta(days=i), rate=Decimal(10 + i).scaleb(-1))
        )
    return rows


@pytest.fixture
def fleet(put) -> None:  # type: ignore[no-untyped-def]
    put(_ledger())


def _query(
    start: dt.datetime, hours: int, flt: LedgerFilter = NO_FILTER, access: Access = ALL
) -> LedgerQuery:
    w = check_window(start, start + dt.timedelta(hours=hours), max_days=400)
    return LedgerQuery(w, filter=flt, access=access)


def _idle_totals(rows: Any) -> dict[str, Decimal]:
    out: dict[str, Decimal] = defaultdict(Decimal)
    for r in rows:
        out[r.currency] += r.idle_cost
    return dict(out)


def _check(conn: Any, q: LedgerQuery, zone: str, **kw: Any) -> None:
    metric = kw.get("metric")
    cells = heatmap(conn, q, zone, **kw)
    [u] = usage(conn, q, metric)
    for measure in ("gpu_hours", "observed_gpu_hours", "effective_gpu_hours"):
        assert sum(getattr(c, measure) for c in cells) == pytest.approx(
            getattr(u, measure), rel=1e-12, abs=1e-12
        )
    idle = idle_waste(
        conn, q, metric, kw.get("threshold_pct", 5.0), streak=False, currency=kw.get("currency")
    )
    idle_hours = sum(r.idle_gpu_hours for r in idle)
    assert sum(c.idle_gpu_hours for c in cells) == pytest.approx(idle_hours, rel=1e-12, abs=1e-12)
    got: dict[str, Decimal] = defaultdict(Decimal)
    for c in cells:
        for cur, amount in c.idle_cost.items():
            got[cur] += amount
    want = _idle_totals(idle)
    if metric is None and kw.get("threshold_pct", 5.0) == 5.0:
        assert dict(got) == want  # the ledger's idle_cost column: exact, to the nano
    else:  # a per-row ratio, rounded once per SQL group: at most half a nano per cell apart
        assert got.keys() == want.keys()
        assert all(abs(got[c] - want[c]) <= Decimal("0.5E-9") * 168 for c in want), (got, want)
    assert sum(c.window_hours for c in cells) == q.window.end_hour - q.window.start_hour


FILTERS = [
    LedgerFilter(),  # the group rollups serve
    LedgerFilter({Dimension.PROJECT: ["alpha", "beta"]}),  # still the rollups
    LedgerFilter({Dimension.DEVICE: ["GPU-1", "MIG-3", "GPU-5"]}),  # device level: ledger_hour
    LedgerFilter(unallocated=False),
]


@pytest.mark.parametrize("flt", FILTERS, ids=["all", "projects", "devices", "allocated"])
def test_cells_add_up_to_usage_and_idle_waste(engine: Engine, fleet: None, flt: LedgerFilter) -> None:
    with engine.connect() as conn:
        for zone in ("Europe/Berlin", "America/New_York", "Asia/Kolkata", "UTC"):
            _check(conn, _query(START, HOURS, flt), zone)
        q = _query(START + dt.timedelta(hours=5), 60, flt)  # partial days: hours of both rollups' edges
        _check(conn, q, "Europe/Berlin", metric="sm_active")
        _check(conn, q, "Europe/Berlin", threshold_pct=1.0)
        _check(conn, q, "Australia/Lord_Howe", currency="USD")  # a half-hour DST change, converted


def test_converted_idle_cost_is_cost_s(engine: Engine, fleet: None) -> None:
    """Converted to USD the cells' idle cost is `cost`'s converted idle cost of the window, exactly."""
    q = _query(START, HOURS)
    with engine.connect() as conn:
        cells = heatmap(conn, q, "Europe/Berlin", currency="USD")
        total = sum(r.idle_cost for r in cost(conn, q, currency="USD"))
    assert sum(c.idle_cost.get("USD", Decimal(0)) for c in cells) == total


def test_a_scoped_caller_adds_up_to_its_own_usage(engine: Engine, fleet: None) -> None:
    alpha = Access(projects=frozenset({"alpha"}))
    with engine.connect() as conn:
        _check(conn, _query(START, HOURS, access=alpha), "Europe/Berlin")
        everyone = heatmap(conn, _query(START, HOURS), "Europe/Berlin")
        own = heatmap(conn, _query(START, HOURS, access=alpha), "Europe/Berlin")
        only = heatmap(
            conn, _query(START, HOURS, LedgerFilter({Dimension.PROJECT: ["alpha"]})), "Europe/Berlin"
        )
    assert [c.gpu_hours for c in own] == [c.gpu_hours for c in only]
    assert sum(c.gpu_hours for c in own) < sum(c.gpu_hours for c in everyone)


ZONES = ["Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "Pacific/Chatham", "UTC"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    zone=st.sampled_from(ZONES),
    first=st.integers(0, HOURS - 1),
    length=st.integers(1, HOURS),
    metric=st.sampled_from([None, "sm_active"]),
)
def test_any_zone_and_window_adds_up(
    engine: Engine, fleet: None, zone: str, first: int, length: int, metric: str | None
) -> None:
    length = min(length, HOURS - first)
    with engine.connect() as conn:
        _check(conn, _query(START + dt.timedelta(hours=first), length), zone, metric=metric)
