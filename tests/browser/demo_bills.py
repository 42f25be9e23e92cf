"""A week of AWS bills for the demo fleet's instances, as a FOCUS 1.0 CSV, so the reconciliation
page has every kind of row to show: bills that match the metrics, an instance billed for more hours
than its GPUs were seen (unmonitored spend), an account billed for one of its two instances (unbilled
usage), an instance no metric ever saw (no metrics), and clouds without bills (no billing)."""

from __future__ import annotations

import csv
import datetime as dt
from decimal import Decimal
from pathlib import Path

COLUMNS = [
    "BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "BillingCurrency", "ChargePeriodStart",
    "ChargePeriodEnd", "BillingPeriodStart", "BillingPeriodEnd", "ChargeCategory", "ChargeClass",
    "ChargeDescription", "ProviderName", "PublisherName", "InvoiceIssuerName", "BillingAccountId",
    "BillingAccountName", "SubAccountId", "ResourceId", "x_UsageType", "ConsumedQuantity", "ConsumedUnit",
    "PricingQuantity", "PricingUnit", "PricingCategory", "RegionId", "ServiceCategory", "ServiceName",
]  # fmt: skip
#: On-demand $ per instance-hour (the demo's rate cards × GPUs per instance).
G5_12XLARGE, P5_48XLARGE = Decimal("5.672"), Decimal("55.04")
#: The demo's AWS instances (connectors/synthetic.py draws them from the connector's name).
G5 = ("736102948551", "us-west-2", ("i-0b7339febc522f66b", "i-0eaec7d3d856624bd"))
P5 = ("418295710364", "us-east-1", ("i-0be75292ceab7b720", "i-0e5b8a49c4e8366e5"))
NEVER_SEEN = ("555555555555", "us-east-1", "i-0ffffffffffffffff")


def _iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _line(
    account: str, region: str, resource: str, kind: str, rate: Decimal, day: dt.datetime, hours: int
) -> list[str]:
    cost = str((rate * hours).quantize(Decimal("0.01")))
    month = day.replace(day=1)
    next_month = (month + dt.timedelta(days=32)).replace(day=1)
    return [
        cost, cost, cost, cost, "USD", _iso(day), _iso(day + dt.timedelta(days=1)), _iso(month),
        _iso(next_month), "Usage", "", f"{kind} instance-hours", "AWS", "AWS", "AWS", "111111111111", "acme",
        account, resource, f"BoxUsage:{kind}", str(hours), "Hours", str(hours), "Hours", "Standard", region,
        "Compute", "Amazon Elastic Compute Cloud",
    ]  # fmt: skip


def write_bills(folder: Path, start: dt.datetime, days: int) -> Path:
    """One line per instance-day: both g5s billed as metered except one day of 30 hours; the first
    p5 only; the never-seen instance on the third day."""
    rows = []
    for n in range(days):
        day = start + dt.timedelta(days=n)
        for resource in G5[2]:
            hours = 30 if (n == days - 2 and resource == G5[2][0]) else 24
            rows.append(_line(G5[0], G5[1], resource, "g5.12xlarge", G5_12XLARGE, day, hours))
        rows.append(_line(P5[0], P5[1], P5[2][0], "p5.48xlarge", P5_48XLARGE, day, 24))
    third = start + dt.timedelta(days=2)
    rows.append(_line(NEVER_SEEN[0], NEVER_SEEN[1], NEVER_SEEN[2], "p5.48xlarge", P5_48XLARGE, third, 24))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "aws-focus.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        writer.writerows(rows)
    return path
