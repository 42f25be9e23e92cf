"""For any small ledger, a report's parts add up: Σ projects = Σ days = Σ environment × model =
the total = the ``cost`` answer, idle cost = allocated + unallocated, the CSV and the HTML carry
the same exact total, and the top idle workloads come largest first (hypothesis)."""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_rows import put, row  # noqa: F401  (put: fixture)
from sqlalchemy import Engine, inspect, text

from service.analytics.access import ALL
from service.analytics.cost import cost
from service.analytics.query import LedgerQuery
from service.reports.build import build_report
from service.reports.csv import render_csv
from service.reports.html import render_html
from service.reports.period import parse_period

Put = Callable[[Iterable[Any]], None]
WEEK = parse_period("2025-W02")  # D0 of ledger_rows is its Monday

cents = st.integers(min_value=0, max_value=100_000).map(lambda c: Decimal(c) / 100)
hour_rows = st.lists(
    st.tuples(
        st.integers(min_value=-24, max_value=24 * 8),  # hours from D0: some before, some after the week
        st.sampled_from(["GPU-a", "GPU-b", "GPU-c"]),
        st.sampled_from(["", "", "j1", "j2", "j3"]),  # '' = unallocated
        st.sampled_from([("p1", "t1"), ("p2", "t1"), (None, "t2"), ("=p3", None)]),
        st.sampled_from(["onprem", "aws"]),
        cents,
        st.floats(min_value=0, max_value=1),  # idle share of the hour
    ),
    max_size=25,
    unique_by=lambda r: (r[0], r[1]),  # one workload per device-hour
)


def _empty(engine: Engine) -> None:
    """Every table emptied (the ledger, its rollups, the version row): each example starts bare."""
    with engine.begin() as conn:
        for name in inspect(conn).get_table_names():
            if name != "alembic_version":
                conn.execute(text(f'DELETE FROM "{name}"'))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=hour_rows)
def test_the_parts_add_up(engine: Engine, put: Put, rows: list[tuple[Any, ...]]) -> None:  # noqa: F811
    _empty(engine)
    ledger = []
    for h, device, job, (project, team), env, amount, idle_share in rows:
        owner = {"project": project, "team": team} if job else {}
        idle_s = round(3600 * idle_share, 3)
        idle_cost = (amount * Decimal(idle_s) / 3600).quantize(Decimal("1E-9"))
        ledger.append(
            row(h, device, job, environment=env, cost=amount, idle_cost=idle_cost, idle_s=idle_s,
                busy_s=3600 - idle_s, **owner)
        )  # fmt: skip
    put(ledger)
    with engine.connect() as conn:
        r = build_report(
            conn, WEEK, generated_at=dt.datetime(2025, 1, 14, tzinfo=dt.UTC), software_version="t"
        )
        answer = cost(conn, LedgerQuery(WEEK.window, access=ALL))
    total = sum((c.cost for c in answer), Decimal(0))
    t = r.totals
    assert t.cost == total
    assert sum((p.cost for p in r.projects), Decimal(0)) == total
    assert sum((d.cost for d in r.trend.days), Decimal(0)) == total
    assert sum((e.cost for e in r.effective), Decimal(0)) == total
    assert t.idle_cost == t.allocated_idle_cost + t.unallocated_idle_cost
    assert sum((p.idle_cost for p in r.projects), Decimal(0)) == t.idle_cost
    idle = [w.idle_cost for w in r.top_idle]
    assert idle == sorted(idle, reverse=True) and len(idle) <= 10
    lines = list(csv.DictReader(io.StringIO(render_csv(r))))
    (csv_total,) = [x["value"] for x in lines if x["section"] == "total" and x["measure"] == "cost"]
    assert Decimal(csv_total) == total
    assert f'id="total-cost" data-value="{format(t.cost, "f")}"' in render_html(r)
