"""A real Oracle Cloud cost report (the FinOps Foundation's focus_converters test data, MIT:
tests/fixtures/public/focus/ATTRIBUTION.md) mapped column for column to FOCUS 1.0, its values
verbatim: OCI's minute-precision starts (``2023-11-13T10:00Z``) beside second-precision ends,
amounts with 18 decimals and in exponent form (``6.266090E-12``), CRLF records, OCI units. Every row
lands as provider ``oracle`` and the totals equal an independent sum of the report."""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import polars as pl

from connectors.billing import BillingBatch
from connectors.focus import FOCUS_1_0_COLUMNS, FocusConfig, FocusConnector

REPORT = (
    Path(__file__).parent.parent
    / "fixtures"
    / "public"
    / "focus"
    / "oci"
    / "reports_cost-csv_0000000030000269.csv.gz"
)
D = Decimal

#: FOCUS column ← OCI cost report column: focus_converters' OCI rules
#: (conversion_rules_export/csv/oci.csv), except BilledCost: they take cost/myCostOverage, empty on
#: every row of this report (no overage); the row's cost is cost/myCost, billed and effective alike.
FROM_REPORT = {
    "AvailabilityZone": "product/availabilityDomain",
    "BilledCost": "cost/myCost",
    "EffectiveCost": "cost/myCost",
    "ContractedCost": "cost/myCost",
    "BillingAccountId": "cost/subscriptionId",
    "BillingCurrency": "cost/currencyCode",
    "ChargeDescription": "product/Description",
    "ChargePeriodStart": "lineItem/intervalUsageStart",
    "ChargePeriodEnd": "lineItem/intervalUsageEnd",
    "ConsumedQuantity": "usage/billedQuantity",
    "PricingQuantity": "usage/billedQuantity",
    "ConsumedUnit": "cost/skuUnitDescription",
    "PricingUnit": "cost/skuUnitDescription",
    "RegionId": "product/region",
    "ResourceId": "product/resourceId",
    "ServiceName": "product/service",
    "SkuId": "cost/productSku",
    "SubAccountId": "lineItem/tenantId",
    "SubAccountName": "product/compartmentName",
}
#: The same on every row (the report is one month of usage from Oracle, no corrections).
FIXED = {
    "ProviderName": "Oracle",
    "PublisherName": "Oracle",
    "InvoiceIssuerName": "Oracle",
    "ChargeCategory": "Usage",
    "ChargeFrequency": "Usage-Based",
    "BillingPeriodStart": "2023-11-01T00:00Z",  # minute precision, as the report writes times
    "BillingPeriodEnd": "2023-12-01T00:00Z",
}


def report() -> list[dict[str, str]]:
    with gzip.open(REPORT, "rb") as raw:
        return list(csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", newline="")))


#: The line's reference number, which OCI's own FOCUS report carries as an extension column: without
#: it, 218 of these 506 hourly rows (the same monitoring retrievals, hour after hour) would be
#: identical records, and FOCUS has no line id.
REFERENCE = ("oci_ReferenceNumber", "lineItem/referenceNo")


def as_focus(rows: list[dict[str, str]], path: Path) -> Path:
    header = [*FOCUS_1_0_COLUMNS, REFERENCE[0]]
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, header, lineterminator="\r\n")
        writer.writeheader()
        for row in rows:
            focus = dict.fromkeys(header, "")
            focus.update({column: row[source] for column, source in FROM_REPORT.items()})
            focus.update(FIXED)
            focus[REFERENCE[0]] = row[REFERENCE[1]]
            writer.writerow(focus)
    return path


def test_a_real_oci_cost_report_as_focus_lands_whole(tmp_path: Path) -> None:
    rows = report()
    assert len(rows) == 506
    assert rows[0]["lineItem/intervalUsageStart"] == "2023-11-13T10:00Z"  # the quirk under test
    assert rows[1]["cost/myCost"] == "2.323760000E-9"
    path = as_focus(rows, tmp_path / "oci-focus.csv")
    connector = FocusConnector(FocusConfig(name="oci", type="focus", path=str(path)))
    (batch,) = connector.read(
        dt.datetime(2023, 11, 1, tzinfo=dt.UTC), dt.datetime(2023, 12, 1, tzinfo=dt.UTC)
    )
    assert isinstance(batch, BillingBatch)
    assert (batch.read, batch.lines.height, batch.refused, batch.findings) == (506, 506, [], [])
    assert (batch.period_start, batch.period_end) == (
        dt.datetime(2023, 11, 1, tzinfo=dt.UTC),
        dt.datetime(2023, 12, 1, tzinfo=dt.UTC),
    )
    assert batch.lines["provider"].unique().to_list() == ["oracle"]

    # independent of the connector: the report's own amounts, each at the ledger's 1e-9
    exact = sum((D(r["cost/myCost"]).quantize(D("1e-9"), ROUND_HALF_EVEN) for r in rows), D(0))
    raw = sum((D(r["cost/myCost"]) for r in rows), D(0))
    billed, effective = batch.lines.select(pl.col("billed_cost").sum(), pl.col("effective_cost").sum()).row(0)
    assert billed == effective == exact == D("2.523589327")
    assert billed.quantize(D("0.01")) == raw.quantize(D("0.01"), ROUND_HALF_EVEN)

    first = batch.lines.filter(pl.col("line_no") == 2).row(0, named=True)
    assert (first["charge_start"], first["charge_end"], first["billed_cost"]) == (
        dt.datetime(2023, 11, 13, 10, tzinfo=dt.UTC),
        dt.datetime(2023, 11, 13, 11, tzinfo=dt.UTC),
        D("0.012264277"),  # 0.012264277499950943, half to even at 1e-9
    )
    tiny = batch.lines.filter(pl.col("line_no") == 3)["billed_cost"].item()
    assert tiny == D("0.000000002")  # 2.323760000E-9
