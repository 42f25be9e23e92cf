"""Each rule kind's findings on hand-built ledger rows, with every figure computed by hand here."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from ledger_rows import D0, at, row
from sqlalchemy import Engine

from service.alerts.conditions import Finding, find
from service.alerts.engine import AlertConfig, AlertEngine
from service.alerts.rules import (
    BudgetForecastRule,
    ConnectorSilentRule,
    IdleWorkloadRule,
    ProjectIdleCostRule,
    UnmonitoredSpendRule,
)
from service.models import ConnectorState, FxRate

Put = Callable[[Iterable[Any]], None]
IDLE = {"idle_s": 3600.0}


def _find(engine: Engine, rule: Any, now: dt.datetime) -> list[Finding]:
    with engine.connect() as conn:
        return sorted(find(conn, rule, now), key=lambda f: f.subject_key)


def test_idle_workload_needs_every_hour_idle_and_observed(engine: Engine, put: Put) -> None:
    """watermark 03:00 → hours 0, 1, 2 are the last 3; only w1 is idle (all devices) in each."""
    rows = [row(h, d, "w1", project="ml", team="r", **IDLE) for h in range(3) for d in ("GPU-a", "GPU-b")]
    rows += [row(h, "GPU-c", "w2", **(IDLE if h != 1 else {"observed_s": 0.0})) for h in range(3)]  # outage
    rows += [
        row(h, "GPU-d", "w3", **(IDLE if h != 2 else {"idle_s": 3000.0})) for h in range(3)
    ]  # 10 min busy
    rows += [row(h, "GPU-e", "w4", **IDLE) for h in range(2)]  # ended after hour 1
    rows += [row(h, "GPU-f", "", **IDLE) for h in range(3)]  # nothing allocated: not a workload
    rows += [row(h, "GPU-g", "w5", source="other", **IDLE) for h in range(3)]  # its source has no watermark
    put([*rows, ConnectorState(name="test", type="x", status="OK", watermark=at(3))])
    rule = IdleWorkloadRule(name="z", kind="idle_workload", hours=3)
    assert _find(engine, rule, at(3)) == [
        Finding(
            subject_key="test/w1",
            subject="w1",
            value=Decimal(3),
            unit="h",
            threshold=Decimal(3),
            message="workload w1 (project ml) on test held 2 GPU(s) idle for the last 3 h",
            project="ml",
            team="r",
        )
    ]
    # A watermark inside hour 3 makes hour 3 the last: w1 has no row there (ended) → nothing.
    with engine.begin() as conn:
        conn.execute(ConnectorState.__table__.update().values(watermark=at(3.5)))  # type: ignore[attr-defined]
    assert _find(engine, rule, at(3.5)) == []
    assert _find(engine, IdleWorkloadRule(name="z", kind="idle_workload", hours=2), at(3)) == []


def test_project_idle_cost_last_24h_in_rule_currency(engine: Engine, put: Put) -> None:
    """ml: 3 × 4.00 USD = 12.00 ≥ 10 (its 100.00 at −30 h is older than 24 h);
    web: (5.00 + 4.10) EUR × 1.10 = 10.01 USD ≥ 10; ops: 9.99 USD < 10."""
    rows = [row(h, "GPU-a", "a", project="ml", idle_cost="4.00") for h in range(3)]
    rows.append(row(-30, "GPU-a", "a", project="ml", idle_cost="100.00"))
    rows += [
        row(1, "GPU-b", "b", project="web", idle_cost="5.00", currency="EUR"),
        row(2, "GPU-b", "b", project="web", idle_cost="4.10", currency="EUR"),
        row(2, "GPU-c", "c", project="ops", idle_cost="9.99"),
    ]
    put([*rows, FxRate(base="EUR", quote="USD", day=D0.date(), rate=Decimal("1.10"))])
    rule = ProjectIdleCostRule(name="i", kind="project_idle_cost", per_day=Decimal(10))
    found = _find(engine, rule, at(3))
    assert [(f.subject_key, f.value, f.unit, f.project) for f in found] == [
        ("project:ml", Decimal("12.00"), "USD", "ml"),
        ("project:web", Decimal("10.01"), "USD", "web"),
    ]
    assert found[1].message == "project web idled 10.01 USD of GPU time in the last 24 h (threshold 10 USD)"


def test_missing_fx_rate_skips_the_rule_not_the_evaluation(engine: Engine, put: Put) -> None:
    put([row(1, "GPU-b", "b", project="web", idle_cost="5.00", currency="JPY")])
    rules = (
        ProjectIdleCostRule(name="i", kind="project_idle_cost", per_day=Decimal(1)),
        ConnectorSilentRule(name="s", kind="connector_silent", hours=1),
    )
    result = AlertEngine(engine, AlertConfig(rules)).evaluate(at(3))
    assert result.errors == {"i": "no FX rate JPY/USD (or USD/JPY) for 2025-01-06"}
    assert result.findings == {"s": []}


def test_budget_forecast_is_the_month_to_date_run_rate(engine: Engine, put: Put) -> None:
    """now = 2025-01-06T00Z: 120 of January's 744 hours elapsed. research spent 100 + 100 = 200 →
    200 × 744 / 120 = 1240.00 > 1200; infra 100 → 620.00 ≤ 1000; December's 1000 does not count."""
    rows = [
        row(-24, "GPU-a", "a", team="research", cost="100"),
        row(-100, "GPU-a", "a", team="research", cost="100"),
        row(-200, "GPU-a", "a", team="research", cost="1000"),  # 2024-12-29
        row(-24, "GPU-b", "b", team="infra", cost="100"),
        row(-24, "GPU-c", "c", team="other", cost="5000"),  # no budget: not watched
    ]
    put(rows)
    budgets = {"research": Decimal(1200), "infra": Decimal(1000)}
    rule = BudgetForecastRule(name="b", kind="budget_forecast", group="team", budgets=budgets)
    [finding] = _find(engine, rule, at(0))
    assert (finding.subject_key, finding.value, finding.threshold, finding.team, finding.project) == (
        "team:research",
        Decimal("1240.00"),
        Decimal(1200),
        "research",
        None,
    )
    assert finding.message == (
        "team research is on course for 1240.00 USD in 2025-01 (spent 200.00 so far), over its budget of 1200"
    )


def test_unmonitored_spend_worst_day_of_the_last_days(engine: Engine, put: Put) -> None:
    """days = 3 at 2025-01-06T01Z: Jan 4-6. aws/111: Jan 4 150, Jan 5 60 → 150 ≥ 100 (Jan 3's 500
    is too old); aws/222: 90 a day → nothing."""

    def spend(h: int, account: str, cost: str) -> Any:
        return row(h, f"i-{account}/unmonitored", provider="aws", account=account, cost=cost, observed_s=0.0)

    put(
        [spend(-30, "111", "150"), spend(-10, "111", "60"), spend(-60, "111", "500"), spend(-10, "222", "90")]
    )
    rule = UnmonitoredSpendRule(name="u", kind="unmonitored_spend", per_day=Decimal(100))
    [finding] = _find(engine, rule, at(1))
    assert (finding.subject_key, finding.value, finding.project) == (
        "account:aws/111",
        Decimal("150.00"),
        None,
    )
    assert finding.message == (
        "150.00 USD billed on 2025-01-04 for aws/111 with no GPU metrics to account for it "
        "(threshold 100 USD per day)"
    )


def test_connector_silent(engine: Engine, put: Put) -> None:
    now = at(10)
    ago = lambda minutes: now - dt.timedelta(minutes=minutes)  # noqa: E731
    put([
        ConnectorState(name="a", type="x", status="OK", last_success_at=ago(120), watermark=ago(30)),
        ConnectorState(name="b", type="x", status="OK", last_success_at=ago(10), watermark=ago(20)),
        ConnectorState(name="c", type="x", status="NEVER_RUN"),
        ConnectorState(name="d", type="x", status="DISABLED", last_success_at=ago(9999), watermark=ago(9999)),
        ConnectorState(name="e", type="x", status="FAILED_CONNECTION"),
    ])  # fmt: skip
    rule = ConnectorSilentRule(name="s", kind="connector_silent", hours=1)
    found = _find(engine, rule, now)
    assert [(f.subject, f.value, f.message) for f in found] == [
        ("a", Decimal("2.00"), "connector a (OK) has brought no new data for 2.00 h"),
        ("e", Decimal(0), "connector e (FAILED_CONNECTION) has brought no new data ever "
         "(no successful run or watermark)"),
    ]  # fmt: skip
    only_b = ConnectorSilentRule(name="s", kind="connector_silent", hours=0.1, connectors=("b",))
    assert [f.subject for f in _find(engine, only_b, now)] == ["b"]
