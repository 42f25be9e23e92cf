"""`currency` on effectiveCost, idleWaste and reconciliation, hand-computed, over HTTP (SQLite and
PostgreSQL): an EUR on-prem site and an EUR Azure subscription next to a USD AWS account, two days
whose EUR/USD rates differ (1.10, then 1.20), converted to USD and to EUR in one answer.

The ledger (D0 = Monday 2025-01-06 00:00 UTC; day 1 = 2025-01-07):

=========  ======  ===========================  =======================  =====================
device     env     day 0 (h0)                   day 1 (h24)              billed (effective)
=========  ======  ===========================  =======================  =====================
GPU-eu     onprem  EUR 10, idle 4, busy ½ h     EUR 10, idle 2, busy 1 h
GPU-eu2    onprem  EUR 5, idle 5 (unallocated)
GPU-us     aws     USD 3, idle 1, busy ½ h      USD 3, idle 0, busy 1 h  USD 3 + 3 (i-us)
GPU-az     azure   EUR 2, busy 1 h              EUR 2, busy 1 h          EUR 2.5 + 2.5 (vm-eu)
=========  ======  ===========================  =======================  =====================

Worked by hand (USD): onprem cost = (10 + 5) × 1.1 + 10 × 1.2 = 28.5 over 3 GPU-hours = 9.5 a
GPU-hour and 28.5 / 1.5 = 19 an effective GPU-hour; azure = 2 × 1.1 + 2 × 1.2 = 4.6. (EUR): aws =
3 × (1/1.1) + 3 × (1/1.2) = 2.727272727 + 2.5 = 5.227272727; per GPU-hour 5.227272727 / 2 =
2.6136363635 → 2.613636364 (half-even at 1e-9: the ratio of the converted sum, not a mean of ratios).
Idle (USD): onprem day 0's 4 + 5 EUR = 9 → 9.9 USD split 4.4 / 5.5, day 1's 2 → 2.4: allocated 6.8,
unallocated 5.5. Reconciliation (USD): azure billed 2.5 × 1.1 + 2.5 × 1.2 = 5.75, ledger 4.6,
variance −1.15 = −20 %.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from api.conftest import Gql, serve
from ledger_rows import at, row
from sqlalchemy import Engine, delete

from service.auth.tokens import TokenStore
from service.models import BillingLine, FxRate

D = Decimal
W = {"start": at(0).isoformat(), "end": at(48).isoformat()}
DAY0, DAY1 = at(0).date(), at(24).date()
EUR_SITE = {"environment": "onprem", "region": "fra", "currency": "EUR", "rate_source": "tco:fra"}
AWS = {
    "environment": "aws",
    "provider": "aws",
    "account": "acct-us",
    "instance_id": "i-us",
    "currency": "USD",
}
AZURE = {
    "environment": "azure",
    "provider": "azure",
    "account": "sub-eu",
    "instance_id": "vm-eu",
    "currency": "EUR",
}
HALF = {"busy_s": 1800.0}
FULL = {"busy_s": 3600.0}


def _line(
    n: int, provider: str, account: str, resource: str, h: int, amount: str, currency: str
) -> BillingLine:
    return BillingLine(
        source="bill", source_file="bill.csv", line_no=n, line_key=str(n), provider=provider, account=account,
        charge_start=at(h), charge_end=at(h + 1), charge_category="Usage", resource_id=resource,
        billed_cost=D(amount), effective_cost=D(amount), currency=currency, gpu_count=1, gpu_hours=D(1),
        instance_type="p5.48xlarge" if provider == "aws" else "Standard_ND96",
    )  # fmt: skip


@pytest.fixture
def ledger(put) -> None:  # type: ignore[no-untyped-def]
    put([
        row(0, "GPU-eu", "job-a", project="alpha", team="ml", cost="10", idle_cost="4", **HALF, **EUR_SITE),
        row(24, "GPU-eu", "job-a", project="alpha", team="ml", cost="10", idle_cost="2", **FULL, **EUR_SITE),
        row(0, "GPU-eu2", cost="5", idle_cost="5", idle_s=3600.0, **EUR_SITE),
        row(0, "GPU-us", "job-b", project="beta", team="web", cost="3", idle_cost="1", **HALF, **AWS),
        row(24, "GPU-us", "job-b", project="beta", team="web", cost="3", idle_cost="0", **FULL, **AWS),
        row(0, "GPU-az", "job-c", project="beta", team="web", cost="2", idle_cost="0", **FULL, **AZURE),
        row(24, "GPU-az", "job-c", project="beta", team="web", cost="2", idle_cost="0", **FULL, **AZURE),
        _line(1, "aws", "acct-us", "i-us", 0, "3", "USD"),
        _line(2, "aws", "acct-us", "i-us", 24, "3", "USD"),
        _line(3, "azure", "sub-eu", "vm-eu", 0, "2.5", "EUR"),
        _line(4, "azure", "sub-eu", "vm-eu", 24, "2.5", "EUR"),
        FxRate(base="EUR", quote="USD", day=DAY0, rate=D("1.10")),
        FxRate(base="EUR", quote="USD", day=DAY1, rate=D("1.20")),
    ])  # fmt: skip


def money(amount: str, currency: str) -> dict[str, str]:
    return {"amount": amount, "currency": currency}


EFFECTIVE = """query($w: TimeWindow!, $c: String, $g: [Dimension!]) { effectiveCost(window: $w, currency: $c,
  groupBy: $g) { environment gpuHours effectiveGpuHours cost { amount currency }
  costPerGpuHour { amount currency } costPerEffectiveGpuHour { amount currency } } }"""


def test_effective_cost_in_usd_and_in_eur(gql: Gql, ledger: None) -> None:
    usd = gql(EFFECTIVE, {"w": W, "c": "USD", "g": ["ENVIRONMENT"]})["data"]["effectiveCost"]
    got = [
        (r["environment"], r["gpuHours"], r["effectiveGpuHours"], r["cost"]["amount"],
         r["costPerGpuHour"]["amount"], r["costPerEffectiveGpuHour"]["amount"])
        for r in usd
    ]  # fmt: skip
    assert got == [
        ("aws", 2.0, 1.5, "6.000000000", "3.000000000", "4.000000000"),
        ("azure", 2.0, 2.0, "4.600000000", "2.300000000", "2.300000000"),
        ("onprem", 3.0, 1.5, "28.500000000", "9.500000000", "19.000000000"),
    ]
    assert {r[m]["currency"] for r in usd for m in ("cost", "costPerGpuHour", "costPerEffectiveGpuHour")} == {
        "USD"
    }
    eur = {
        r["environment"]: r
        for r in gql(EFFECTIVE, {"w": W, "c": "eur", "g": ["ENVIRONMENT"]})["data"]["effectiveCost"]
    }
    assert eur["aws"]["cost"] == money("5.227272727", "EUR")
    assert eur["aws"]["costPerGpuHour"] == money("2.613636364", "EUR")
    assert eur["aws"]["costPerEffectiveGpuHour"] == money("3.484848485", "EUR")  # 5.227272727 / 1.5
    assert (eur["onprem"]["cost"], eur["azure"]["cost"]) == (
        money("25.000000000", "EUR"),
        money("4.000000000", "EUR"),
    )
    # Rows add up to the total of the same window without groupBy, in each currency.
    for c, rows in (("USD", usd), ("EUR", list(eur.values()))):
        [total] = gql(EFFECTIVE, {"w": W, "c": c, "g": []})["data"]["effectiveCost"]
        assert D(total["cost"]["amount"]) == sum(D(r["cost"]["amount"]) for r in rows), c
    # Without currency: one row per source currency, as before.
    plain = gql(EFFECTIVE, {"w": W, "g": []})["data"]["effectiveCost"]
    assert [r["cost"] for r in plain] == [money("29.000000000", "EUR"), money("6.000000000", "USD")]


IDLE = """query($w: TimeWindow!, $c: String, $g: [Dimension!], $gr: Granularity) { idleWaste(
  window: $w, currency: $c, groupBy: $g, granularity: $gr) { periodStart environment idleGpuHours
  idleCost { amount currency } allocatedIdleCost { amount currency }
  unallocatedIdleCost { amount currency } longestIdleStreakHours } }"""


def test_idle_waste_in_usd_and_eur(gql: Gql, ledger: None) -> None:
    rows = gql(IDLE, {"w": W, "c": "USD", "g": ["ENVIRONMENT"]})["data"]["idleWaste"]
    by_env = {r["environment"]: r for r in rows}
    assert by_env["onprem"]["allocatedIdleCost"] == money("6.800000000", "USD")  # 4.4 + 2.4
    assert by_env["onprem"]["unallocatedIdleCost"] == money("5.500000000", "USD")
    assert by_env["onprem"]["idleCost"] == money("12.300000000", "USD")
    assert (by_env["onprem"]["idleGpuHours"], by_env["onprem"]["longestIdleStreakHours"]) == (1.0, 1)
    assert by_env["aws"]["idleCost"] == money("1.000000000", "USD")
    eur = {
        r["environment"]: r
        for r in gql(IDLE, {"w": W, "c": "EUR", "g": ["ENVIRONMENT"]})["data"]["idleWaste"]
    }
    assert eur["aws"]["idleCost"] == money("0.909090909", "EUR") and eur["onprem"]["idleCost"] == money(
        "11.000000000", "EUR"
    )
    # Per day rows add up to the window's total; the total equals cost's converted idle cost.
    daily = gql(IDLE, {"w": W, "c": "USD", "g": [], "gr": "DAY"})["data"]["idleWaste"]
    assert [r["idleCost"]["amount"] for r in daily] == ["10.900000000", "2.400000000"]  # 9.9 + 1; 2.4
    [total] = gql(IDLE, {"w": W, "c": "USD", "g": []})["data"]["idleWaste"]
    assert total["idleCost"] == money("13.300000000", "USD")
    cost = gql(
        'query($w: TimeWindow!){ cost(window: $w, currency: "USD") { idleCost { amount } } }', {"w": W}
    )
    assert sum(D(r["idleCost"]["amount"]) for r in cost["data"]["cost"]) == D("13.3")


RECON = """query($w: TimeWindow!, $c: String, $g: [ReconciliationDimension!]) { reconciliation(window: $w,
  currency: $c, groupBy: $g) { provider day billedCost { amount currency } ledgerCost { amount currency }
  costVariance { amount currency } costVariancePct status } }"""


def test_reconciliation_in_usd_and_eur(gql: Gql, ledger: None) -> None:
    usd = {
        r["provider"]: r
        for r in gql(RECON, {"w": W, "c": "USD", "g": ["PROVIDER"]})["data"]["reconciliation"]
    }
    assert usd["azure"]["billedCost"] == money("5.750000000", "USD")
    assert usd["azure"]["ledgerCost"] == money("4.600000000", "USD")
    assert (usd["azure"]["costVariance"], usd["azure"]["costVariancePct"]) == (
        money("-1.150000000", "USD"),
        -20.0,
    )
    assert usd["aws"]["billedCost"] == usd["aws"]["ledgerCost"] == money("6.000000000", "USD")
    eur = {
        r["provider"]: r
        for r in gql(RECON, {"w": W, "c": "EUR", "g": ["PROVIDER"]})["data"]["reconciliation"]
    }
    assert eur["aws"]["billedCost"] == eur["aws"]["ledgerCost"] == money("5.227272727", "EUR")
    assert eur["aws"]["costVariance"] == money("0.000000000", "EUR")
    assert (eur["azure"]["billedCost"], eur["azure"]["costVariancePct"]) == (
        money("5.000000000", "EUR"),
        -20.0,
    )
    # Rows by provider and day add up to the rows by provider, and to the total.
    daily = gql(RECON, {"w": W, "c": "USD", "g": ["PROVIDER", "DAY"]})["data"]["reconciliation"]
    [total] = gql(RECON, {"w": W, "c": "USD", "g": []})["data"]["reconciliation"]
    for measure in ("billedCost", "ledgerCost"):
        assert sum(D(r[measure]["amount"]) for r in daily) == D(total[measure]["amount"])
        assert sum(D(r[measure]["amount"]) for r in usd.values()) == D(total[measure]["amount"])
    assert total["billedCost"] == money("11.750000000", "USD")


def test_a_missing_days_rate_and_unknown_currencies(gql: Gql, ledger: None, engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(delete(FxRate.__table__).where(FxRate.__table__.c.day == DAY1))  # type: ignore[attr-defined]
    queries = {
        "effectiveCost": (EFFECTIVE, {"g": []}),
        "idleWaste": (IDLE, {"g": []}),
        "reconciliation": (RECON, {"g": []}),
    }
    for field, (query, extra) in queries.items():
        body = gql(query, {"w": W, "c": "USD", **extra})
        [err] = body["errors"]
        assert err["extensions"] == {"code": "MISSING_FX_RATE"}, field
        assert "EUR/USD" in err["message"] and "2025-01-07" in err["message"], (field, err["message"])
        for bad in ("usd'; drop table fx_rate; --", "ZZZ", "x" * 10_000, "€€€"):
            body = gql(query, {"w": W, "c": bad, **extra})
            [err] = body["errors"]
            assert err["extensions"] == {"code": "UNKNOWN_CURRENCY"}, (field, bad)
            assert len(err["message"]) < 200  # a 10 KB code is not echoed back whole
    # The first day alone still converts.
    w0 = {"start": at(0).isoformat(), "end": at(24).isoformat()}
    [row0] = gql(EFFECTIVE, {"w": w0, "c": "USD", "g": []})["data"]["effectiveCost"]
    assert row0["cost"] == money("21.700000000", "USD")  # (10 + 5 + 2) × 1.1 + 3


@pytest.fixture
def scoped(engine: Engine, ledger: None) -> Iterator[dict[str, Any]]:
    store = TokenStore(engine)
    secret = store.create("alpha-only", ["read:project:alpha"])[0]
    for base in serve(engine, auth={}):
        yield {"base": base, "auth": {"Authorization": f"Bearer {secret}"}}


def test_a_project_token_gets_only_its_rows_converted(scoped: dict[str, Any]) -> None:
    def post(query: str, variables: dict[str, Any]) -> dict[str, Any]:
        r = httpx.post(f"{scoped['base']}/graphql", json={"query": query, "variables": variables},
                       headers=scoped["auth"], timeout=30)  # fmt: skip
        assert r.status_code == 200 and "Traceback" not in r.text
        body: dict[str, Any] = r.json()
        return body

    eff = post(EFFECTIVE, {"w": W, "c": "USD", "g": []})["data"]["effectiveCost"]
    assert [r["cost"] for r in eff] == [money("23.000000000", "USD")]  # alpha: 10 × 1.1 + 10 × 1.2
    idle = post(IDLE, {"w": W, "c": "USD", "g": []})["data"]["idleWaste"]
    assert [r["idleCost"] for r in idle] == [money("6.800000000", "USD")]  # 4 × 1.1 + 2 × 1.2
    body = post(RECON, {"w": W, "c": "USD", "g": []})
    assert body["data"] is None and body["errors"][0]["extensions"]["code"] == "FORBIDDEN"


def test_no_currency_keeps_the_old_answers(gql: Gql, ledger: None) -> None:
    rows = gql(RECON, {"w": W, "g": ["PROVIDER"]})["data"]["reconciliation"]
    assert [(r["provider"], r["billedCost"]) for r in rows] == [
        ("aws", money("6.000000000", "USD")),
        ("azure", money("5.000000000", "EUR")),
    ]


GROUPINGS = [[], ["ENVIRONMENT"], ["PROJECT"], ["DEVICE"], ["TEAM", "GPU_MODEL"], ["ENVIRONMENT", "PROJECT"]]


@pytest.mark.parametrize("currency", ["USD", "EUR"])
def test_converted_rows_add_up_under_every_grouping(gql: Gql, ledger: None, currency: str) -> None:
    """Each (day, currency) total is converted once and split back, so every grouping (and every
    granularity) of the same window adds up to the same converted total, to the nano."""
    totals: dict[str, set[Decimal]] = {"effectiveCost": set(), "idleWaste": set(), "reconciliation": set()}
    for group_by in GROUPINGS:
        eff = gql(EFFECTIVE, {"w": W, "c": currency, "g": group_by})["data"]["effectiveCost"]
        totals["effectiveCost"].add(sum(D(r["cost"]["amount"]) for r in eff))
        for granularity in ("TOTAL", "DAY", "HOUR"):
            idle = gql(IDLE, {"w": W, "c": currency, "g": group_by, "gr": granularity})["data"]["idleWaste"]
            totals["idleWaste"].add(sum(D(r["idleCost"]["amount"]) for r in idle))
    for group_by in ([], ["PROVIDER"], ["DAY"], ["PROVIDER", "DAY"]):
        recon = gql(RECON, {"w": W, "c": currency, "g": group_by})["data"]["reconciliation"]
        totals["reconciliation"].add(sum(D(r["billedCost"]["amount"]) for r in recon))
    assert {k: len(v) for k, v in totals.items()} == {"effectiveCost": 1, "idleWaste": 1, "reconciliation": 1}
    expected = {"USD": ("39.100000000", "13.300000000"), "EUR": ("34.227272727", "11.909090909")}[currency]
    assert (totals["effectiveCost"].pop(), totals["idleWaste"].pop()) == tuple(map(D, expected))
