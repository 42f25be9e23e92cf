"""Reconciliation (docs/design.md §5): every status on hand-built bills and ledgers, exact figures."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from billing_rows import add, scenario
from sqlalchemy import Engine

from service.analytics.access import ALL
from service.analytics.window import Window
from service.billing.rates import reprice
from service.billing.reconcile import Key, Status, reconcile

D = Decimal
SEP3 = dt.date(2025, 9, 3)
WINDOW = Window(dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC))


def _table(rows) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [
        (r.provider, r.resource, r.day, r.currency, float(r.billed_gpu_hours), r.metered_gpu_hours,
         r.billed_cost, r.ledger_cost, r.status)
        for r in rows
    ]  # fmt: skip


def test_one_row_per_resource_and_day_with_its_status(engine: Engine) -> None:
    add(engine, scenario())
    reprice(engine, WINDOW.start, WINDOW.end)
    with engine.connect() as conn:
        rows = reconcile(conn, WINDOW, access=ALL)
    assert _table(rows) == [
        ("aws", "i-0d1e4c9a2f7b3e801", SEP3, "USD", 96.0, 0.0, D("660.48"), D("660.48"), Status.NO_METRICS),
        ("aws", "i-gap", SEP3, "USD", 32.0, 16.0, D("220.16"), D("220.16"), Status.UNMONITORED_SPEND),
        ("aws", "i-match", SEP3, "USD", 24.0, 24.0, D("165.12"), D("165.12"), Status.MATCHED),
        ("aws", "i-nobill", SEP3, "XXX", 0.0, 8.0, D(0), D(0), Status.NO_BILLING),
        ("aws", "i-over", SEP3, "USD", 4.0, 6.0, D("22.688"), D("22.688"), Status.UNBILLED_USAGE),
        ("aws", "i-unknown", SEP3, "USD", 0.0, 0.0, D("100"), D(0), Status.UNKNOWN_INSTANCE_TYPE),
        ("azure", None, SEP3, "USD", 0.0, 0.0, D("746.88"), D(0), Status.UNUSED_COMMITMENT),
    ]
    gap = rows[1]
    assert (gap.gpu_hours_variance, gap.gpu_hours_variance_pct, gap.cost_variance) == (-16.0, -50.0, D(0))
    assert all(r.account == ("sub" if r.provider == "azure" else "111122223333") for r in rows)


def test_grouping_sums_and_recomputes_the_status(engine: Engine) -> None:
    add(engine, scenario())
    reprice(engine, WINDOW.start, WINDOW.end)
    with engine.connect() as conn:
        rows = reconcile(conn, WINDOW, (Key.PROVIDER,), access=ALL)
        tolerant = reconcile(conn, WINDOW, filters={"resource": ["i-gap"]}, tolerance_pct=50, access=ALL)
    assert _table(rows) == [
        # 96 + 24 + 4 + 32 billed vs 0 + 24 + 6 + 16 metered; i-nobill's unpriced hours keep their own row
        ("aws", None, None, "USD", 156.0, 46.0, D("1068.448"), D("1068.448"), Status.UNMONITORED_SPEND),
        ("aws", None, None, "XXX", 0.0, 8.0, D(0), D(0), Status.NO_BILLING),
        ("aws", None, None, "USD", 0.0, 0.0, D("100"), D(0), Status.UNKNOWN_INSTANCE_TYPE),
        ("azure", None, None, "USD", 0.0, 0.0, D("746.88"), D(0), Status.UNUSED_COMMITMENT),
    ]
    assert [(r.resource, r.status) for r in tolerant] == [("i-gap", Status.MATCHED)]  # |16 − 32| ≤ 50 % of 32


def test_account_credits_and_tax_are_reported_apart_and_cost_no_gpu(engine: Engine) -> None:
    from billing_rows import DAY3, at, hours, line, p5_day

    add(engine, [
        p5_day(),
        line(None, DAY3, at(24), "-100.00", charge_category="Credit", charge_type="Credit"),
        line(None, DAY3, at(24), "12.50", charge_category="Tax", charge_type="Tax"),
        line(None, DAY3, at(24), "0", charge_type="SavingsPlanNegation"),  # no resource, no status
    ])  # fmt: skip
    reprice(engine, WINDOW.start, WINDOW.end)
    with engine.connect() as conn:
        rows = reconcile(conn, WINDOW, [Key.PROVIDER, Key.RESOURCE], access=ALL)
    by_status = {r.status: r for r in rows}
    assert set(by_status) == {Status.NO_METRICS, Status.ACCOUNT_ADJUSTMENT}
    adjustment = by_status[Status.ACCOUNT_ADJUSTMENT]
    assert (adjustment.resource, adjustment.billed_cost, adjustment.ledger_cost) == (None, D("-87.5"), D(0))
    # The ledger's GPU cost is the instance's bill alone: credits and tax are not spread over GPUs.
    assert sum((r.cost for r in hours(engine)), D(0)) == D("660.48")
