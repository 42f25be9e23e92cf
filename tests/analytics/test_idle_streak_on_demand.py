"""The longest idle streak is computed only when asked for (issue 13 point 2), with the same numbers.

The streak is the only query of ``idleWaste`` with a window function (``ROW_NUMBER() OVER``): the
statements the engine sends are counted with a ``before_cursor_execute`` listener, in-process and
through the running app over HTTP (GraphQL selections, fragments included).
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from api.conftest import serve
from ledger_rows import at, row
from sqlalchemy import Engine, event

from service.analytics.access import ALL
from service.analytics.dims import Dimension, Granularity
from service.analytics.idle import IdleRow, idle_waste
from service.analytics.query import LedgerQuery
from service.analytics.window import check_window

D = Decimal
IDLE_0_1 = {"idle_s": 3600.0, "hist_0_1_s": 3600.0, "obs_s_sm_active": 3600.0, "idle_s_sm_active": 3600.0}
BUSY = {"busy_s": 2200.0, "hist_50_75_s": 3600.0, "obs_s_sm_active": 3600.0}
W = {"start": at(0).isoformat(), "end": at(8).isoformat()}


@pytest.fixture
def ledger(put) -> None:  # type: ignore[no-untyped-def]
    a = [
        row(0, cost="1", idle_cost="1", **IDLE_0_1),
        row(1, "GPU-a", "job-1", project="alpha", cost="1", idle_cost="1", **IDLE_0_1),
        row(2, "GPU-a", "job-1", project="alpha", cost="1", idle_cost="0", **BUSY),
        *(row(h, cost="1", idle_cost="1", **IDLE_0_1) for h in (3, 4, 5)),
        row(6, observed_s=0.0, cost="1", idle_cost="0"),  # present, unobserved: ends the run
        row(7, cost="1", idle_cost="1", **IDLE_0_1),
    ]
    half = {"idle_s": 1800.0, "hist_0_1_s": 1800.0, "hist_75_100_s": 1800.0, "busy_s": 1700.0}
    b = [row(h, "GPU-b", "job-2", project="beta", cost="2", idle_cost="1", **half) for h in range(4)]
    put([*a, *b])


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[str]]:
    """Every SQL statement the engine sends while the test runs."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    yield sent
    event.remove(engine, "before_cursor_execute", record)


def streak_queries(sent: list[str]) -> int:
    return sum("row_number() over" in s.lower() for s in sent)


def run(engine: Engine, granularity: Granularity = Granularity.TOTAL, **kw: Any) -> list[IdleRow]:
    window = check_window(at(0), at(8), max_days=400)
    q = LedgerQuery(window, granularity, (Dimension.DEVICE,), access=ALL)
    with engine.connect() as conn:
        return idle_waste(conn, q, **kw)


@pytest.mark.parametrize("kw", [{}, {"threshold_pct": 1.0}, {"metric": "sm_active"}])
def test_without_the_streak_no_window_query_and_the_same_other_fields(
    engine: Engine, ledger: None, statements: list[str], kw: dict[str, Any]
) -> None:
    with_streak = run(engine, **kw)
    assert streak_queries(statements) == 1
    statements.clear()
    without = run(engine, streak=False, **kw)
    assert streak_queries(statements) == 0
    assert [r.longest_idle_streak_hours for r in with_streak] == [3, 0]  # GPU-a hours 3–5; GPU-b never whole
    assert [r.longest_idle_streak_hours for r in without] == [None, None]
    strip = [r.__dict__ | {"longest_idle_streak_hours": None} for r in with_streak]
    assert [r.__dict__ for r in without] == strip
    a, b = without
    assert (a.allocated_idle_gpu_hours, a.unallocated_idle_gpu_hours) == (1.0, 5.0)
    if "metric" not in kw:  # GPU-b holds no sm_active seconds
        assert (b.allocated_idle_gpu_hours, b.allocated_idle_cost) == (2.0, D(4))


def test_hourly_streaks_as_before(engine: Engine, ledger: None) -> None:
    hourly = run(engine, Granularity.HOUR)
    got = [(r.key.period_start, r.key.value(Dimension.DEVICE), r.longest_idle_streak_hours) for r in hourly]
    assert got == [
        (at(0), "GPU-a", 1), (at(0), "GPU-b", 0), (at(1), "GPU-a", 1), (at(1), "GPU-b", 0),
        (at(2), "GPU-a", 0), (at(2), "GPU-b", 0), (at(3), "GPU-a", 1), (at(3), "GPU-b", 0),
        (at(4), "GPU-a", 1), (at(5), "GPU-a", 1), (at(6), "GPU-a", 0), (at(7), "GPU-a", 1),
    ]  # fmt: skip


# --- through GraphQL ----------------------------------------------------------------------------------


@pytest.fixture
def gql(engine: Engine) -> Iterator[Any]:
    """The real app under uvicorn in a thread, on this engine; ``gql(query) -> idleWaste rows``."""
    running = serve(engine)
    base = next(running)

    def query(text: str) -> list[dict[str, Any]]:
        r = httpx.post(f"{base}/graphql", json={"query": text, "variables": {"w": W}}, timeout=30)
        body = r.json()
        assert "errors" not in body, body
        rows: list[dict[str, Any]] = body["data"]["idleWaste"]
        return rows

    yield query
    running.close()  # stops the server


OTHER = (
    "device idleGpuHours idleCost { amount currency } allocatedIdleGpuHours unallocatedIdleGpuHours metric"
)
IDLE_WASTE = "query($w: TimeWindow!){ idleWaste(window: $w, groupBy: [DEVICE]) { SELECTION } } FRAGMENTS"


def ask(gql: Any, selection: str, fragments: str = "") -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = gql(
        IDLE_WASTE.replace("SELECTION", selection).replace("FRAGMENTS", fragments)
    )
    return rows


def test_graphql_streak_only_when_selected(gql: Any, ledger: None, statements: list[str]) -> None:
    without = ask(gql, OTHER)
    assert streak_queries(statements) == 0
    assert [(r["device"], r["idleGpuHours"], r["idleCost"]) for r in without] == [
        ("GPU-a", 6.0, {"amount": "6.000000000", "currency": "USD"}),
        ("GPU-b", 2.0, {"amount": "4.000000000", "currency": "USD"}),
    ]
    assert all("longestIdleStreakHours" not in r for r in without)

    with_streak = ask(gql, OTHER + " longestIdleStreakHours")
    assert streak_queries(statements) == 1
    assert [r.pop("longestIdleStreakHours") for r in with_streak] == [3, 0]
    assert with_streak == without

    # Asked for through a named fragment, an inline fragment or an alias: still computed.
    for selection, fragments in (
        ("device ...S", "fragment S on IdleWasteRow { longestIdleStreakHours }"),
        ("device ... on IdleWasteRow { longestIdleStreakHours }", ""),
    ):
        rows = ask(gql, selection, fragments)
        assert [(r["device"], r["longestIdleStreakHours"]) for r in rows] == [("GPU-a", 3), ("GPU-b", 0)]
    assert [r["run"] for r in ask(gql, "run: longestIdleStreakHours")] == [3, 0]
    assert streak_queries(statements) == 4
