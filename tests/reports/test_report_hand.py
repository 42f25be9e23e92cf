"""A report over three hand-made ledger hours, on SQLite and PostgreSQL: every figure computed by
hand; user data (project names) escaped in the HTML and defused in the CSV.

Week 2025-W02 (Monday 2025-01-06 = D0), USD:

* GPU-a, Monday 00:00, job ``job1`` of project ``<script>alert(1)</script>`` (team t1): cost 10,
  idle cost 4 (1,440 s idle), busy 2,160 s;
* GPU-a, Monday 01:00, nobody (the unallocated pool): cost 10, all of it idle (3,600 s), busy 0;
* GPU-b, Tuesday 00:00, job ``job2`` of project ``=HYPERLINK("http://x")`` (team t2): cost 6,
  idle 0, busy 3,600 s.

So: cost 26 = 20 on Monday + 6 on Tuesday; idle cost 14 = 4 allocated + 10 unallocated; 3 GPU-hours,
1.6 effective (5,760 busy s); 26 / 3 = 8.666666667 per GPU-hour, 26 / 1.6 = 16.25 per effective one.
In EUR at 0.5 on Monday and 2 on Tuesday: 20 × 0.5 + 6 × 2 = 22.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

import pytest
from ledger_rows import D0, put, row  # noqa: F401  (put: fixture)
from sqlalchemy import Engine

from service.models import FxRate
from service.reports.build import ReportError, Scope, build_report
from service.reports.csv import render_csv
from service.reports.html import render_html
from service.reports.period import parse_period

Put = Callable[[Iterable[Any]], None]
SCRIPT = "<script>alert(1)</script>"
FORMULA = '=HYPERLINK("http://x")'
NOW = dt.datetime(2025, 1, 14, 7, tzinfo=dt.UTC)


@pytest.fixture
def hand(engine: Engine, put: Put) -> Engine:  # noqa: F811
    job1 = {"project": SCRIPT, "team": "t1"}
    job2 = {"project": FORMULA, "team": "t2"}
    put([
        row(0, "GPU-a", "job1", cost="10", idle_cost="4", idle_s=1440.0, busy_s=2160.0, **job1),
        row(1, "GPU-a", "", cost="10", idle_cost="10", idle_s=3600.0, busy_s=0.0),
        row(24, "GPU-b", "job2", cost="6", idle_cost="0", idle_s=0.0, busy_s=3600.0, **job2),
        FxRate(base="USD", quote="EUR", day=D0.date(), rate=Decimal("0.5")),
        FxRate(base="EUR", quote="USD", day=(D0 + dt.timedelta(days=1)).date(), rate=Decimal("0.5")),
    ])  # fmt: skip
    return engine


def _build(engine: Engine, scope: Scope = Scope(), currency: str | None = None):  # type: ignore[no-untyped-def]  # noqa: B008
    with engine.connect() as conn:
        return build_report(
            conn, parse_period("2025-W02"), scope, currency, generated_at=NOW, software_version="9.9.9"
        )


def test_hand_computed_week(hand: Engine) -> None:
    r = _build(hand)
    t = r.totals
    assert r.currency == "USD" and not r.converted
    assert (t.cost, t.idle_cost, t.allocated_idle_cost, t.unallocated_idle_cost) == (26, 14, 4, 10)
    assert (t.gpu_hours, t.effective_gpu_hours) == (3.0, 1.6)
    assert t.idle_gpu_hours == pytest.approx(1.4) and t.unallocated_idle_gpu_hours == 1.0
    assert t.cost_per_gpu_hour == Decimal("8.666666667")
    assert t.cost_per_effective_gpu_hour == Decimal("16.250000000")
    assert [(d.day.isoformat(), d.cost, d.idle_cost) for d in r.trend.days] == [
        ("2025-01-06", 20, 14), ("2025-01-07", 6, 0), *((f"2025-01-{n:02d}", 0, 0) for n in range(8, 13)),
    ]  # fmt: skip
    assert r.trend.previous_label == "2025-W01" and r.trend.previous_cost == 0 and r.trend.change == 26
    assert [(p.project, p.unallocated, p.cost) for p in r.projects] == [
        (SCRIPT, False, 10), (None, True, 10), (FORMULA, False, 6),  # by cost, the pool after a tie
    ]  # fmt: skip
    assert [(w.workload, w.project, w.idle_cost, w.idle_gpu_hours) for w in r.top_idle] == [
        ("job1", SCRIPT, 4, 0.4)
    ]
    assert [(e.environment, e.gpu_model, e.cost, e.cost_per_effective_gpu_hour) for e in r.effective] == [
        ("onprem", "H200", 26, Decimal("16.250000000"))
    ]
    assert r.reconciliation is not None and r.reconciliation.lines == []
    assert r.data_version >= 1 and r.software_version == "9.9.9"


def test_converted_per_day(hand: Engine) -> None:
    r = _build(hand, currency="eur")
    assert r.currency == "EUR" and r.converted
    assert r.totals.cost == 22  # 20 × 0.5 + 6 × 2
    assert [d.cost for d in r.trend.days[:2]] == [10, 12]
    rows = list(csv.DictReader(io.StringIO(render_csv(r))))
    assert [r["value"] for r in rows if r["section"] == "total" and r["measure"] == "cost"] == [
        "22.000000000"
    ]


def test_a_project_report_is_its_own_slice(hand: Engine) -> None:
    r = _build(hand, Scope(project=SCRIPT))
    assert r.totals.cost == 10 and r.totals.unallocated_idle_cost == 0
    assert [p.project for p in r.projects] == [SCRIPT]
    assert r.reconciliation is None  # billing data is account-wide
    team = _build(hand, Scope(team="t2"))
    assert team.totals.cost == 6 and [w.workload for w in team.top_idle] == []


def test_html_escapes_user_data(hand: Engine) -> None:
    page = render_html(_build(hand))
    assert SCRIPT not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page.lower()  # the report has no script at all
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        "HYPERLINK(&#34;http://x&#34;)", ""
    )  # nothing to fetch: no link, image or font from elsewhere


def test_csv_defuses_formulas_and_keeps_money_exact(hand: Engine) -> None:
    rows = list(csv.DictReader(io.StringIO(render_csv(_build(hand)))))
    projects = {r["project"] for r in rows if r["section"] == "project"}
    assert projects == {"", SCRIPT, "'" + FORMULA}
    cost = {r["project"]: r["value"] for r in rows if r["section"] == "project" and r["measure"] == "cost"}
    assert cost == {"": "10.000000000", SCRIPT: "10.000000000", "'" + FORMULA: "6.000000000"}


def test_mixed_currencies_need_a_currency(hand: Engine, put: Put) -> None:  # noqa: F811
    put([row(30, "GPU-c", "job3", cost="1", idle_cost="0", currency="EUR", project="p")])
    with pytest.raises(ReportError) as caught:
        _build(hand)
    assert caught.value.argument == "--currency" and "EUR, USD" in caught.value.message
    assert _build(hand, currency="USD").totals.cost == Decimal("26.5")  # 1 EUR on Tuesday = 0.5 USD
