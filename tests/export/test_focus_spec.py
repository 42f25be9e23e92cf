"""The FOCUS 1.2 export checked against the FOCUS 1.2 specification's column requirements
(FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec, tag v1.2, specification/columns/*.md and
specification/attributes/*.md; docs/focus.md lists the requirements relied on). No validator knows
1.2, so the requirements are written out here, and every row of both files (CSV and Parquet) of the
demo fleet and of the hand-built ledger with bills (test_focus_export) is checked against them."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
from decimal import Decimal
from typing import Any

import httpx
import polars as pl
import pytest
from api.conftest import serve
from export.helpers import DEMO_END, DEMO_START, load_demo_fleet
from export.test_focus_export import W
from export.test_focus_export import ledger as ledger  # noqa: F401  (fixture)
from sqlalchemy import Engine

# --- the requirements (FOCUS 1.2) -----------------------------------------------------------------

#: Feature level "Mandatory": MUST be present in a FOCUS dataset.
MANDATORY = {
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargePeriodEnd",
    "ChargePeriodStart", "ContractedCost", "EffectiveCost", "InvoiceIssuerName", "ListCost",
    "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "ServiceCategory", "ServiceName",
}  # fmt: skip
#: Every column id FOCUS 1.2 defines (specification/columns), with its data type.
DECIMAL = {
    "BilledCost", "CommitmentDiscountQuantity", "ConsumedQuantity", "ContractedCost", "ContractedUnitPrice",
    "EffectiveCost", "ListCost", "ListUnitPrice", "PricingCurrencyContractedUnitPrice",
    "PricingCurrencyEffectiveCost", "PricingCurrencyListUnitPrice", "PricingQuantity",
}  # fmt: skip
DATETIME = {"BillingPeriodEnd", "BillingPeriodStart", "ChargePeriodEnd", "ChargePeriodStart"}
JSON = {"SkuPriceDetails", "Tags"}
STRING = {
    "AvailabilityZone", "BillingAccountId", "BillingAccountName", "BillingAccountType",
    "BillingCurrency", "CapacityReservationId", "CapacityReservationStatus", "ChargeCategory",
    "ChargeClass", "ChargeDescription", "ChargeFrequency", "CommitmentDiscountCategory",
    "CommitmentDiscountId", "CommitmentDiscountName", "CommitmentDiscountStatus",
    "CommitmentDiscountType", "CommitmentDiscountUnit", "ConsumedUnit", "InvoiceId", "InvoiceIssuerName",
    "PricingCategory", "PricingCurrency", "PricingUnit", "ProviderName", "PublisherName", "RegionId",
    "RegionName", "ResourceId", "ResourceName", "ResourceType", "ServiceCategory", "ServiceName",
    "ServiceSubcategory", "SkuId", "SkuMeter", "SkuPriceId", "SubAccountId", "SubAccountName",
    "SubAccountType",
}  # fmt: skip
FOCUS_1_2 = DECIMAL | DATETIME | JSON | STRING
#: "Allows nulls: False".
NOT_NULL = {
    "BilledCost", "BillingAccountId", "BillingCurrency", "BillingPeriodEnd", "BillingPeriodStart",
    "ChargeCategory", "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart", "ContractedCost",
    "EffectiveCost", "InvoiceIssuerName", "ListCost", "ProviderName", "PublisherName", "ServiceCategory",
    "ServiceName", "ServiceSubcategory", "BillingAccountType", "PricingCurrency",
}  # fmt: skip
ALLOWED = {
    "ChargeCategory": {"Usage", "Purchase", "Tax", "Credit", "Adjustment"},
    "ChargeClass": {"Correction"},
    "ChargeFrequency": {"One-Time", "Recurring", "Usage-Based"},
    "PricingCategory": {"Standard", "Dynamic", "Committed", "Other"},
    "ServiceCategory": {
        "AI and Machine Learning", "Analytics", "Business Applications", "Compute", "Databases",
        "Developer Tools", "Multicloud", "Identity", "Integration", "Internet of Things",
        "Management and Governance", "Media", "Migration", "Mobile", "Networking", "Security", "Storage",
        "Web", "Other",
    },
}  # fmt: skip
#: ServiceSubcategory → its one parent ServiceCategory (the Compute ones and the "Other" of each).
SUBCATEGORY_PARENT = {
    "Containers": "Compute",
    "End User Computing": "Compute",
    "Quantum Compute": "Compute",
    "Serverless Compute": "Compute",
    "Virtual Machines": "Compute",
    "Other (Compute)": "Compute",
    **{f"Other ({c})": c for c in ALLOWED["ServiceCategory"] if c != "Other"},
    "Other (Other)": "Other",
}
#: MUST NOT be null when ChargeCategory is "Usage" or "Purchase" and ChargeClass is not "Correction"
#: (where the column is present; ConsumedQuantity: "Usage" only).
NOT_NULL_FOR_USAGE = {
    "PricingQuantity", "PricingCategory", "ListUnitPrice", "ContractedUnitPrice", "SkuId", "SkuPriceId",
    "ConsumedQuantity",
}  # fmt: skip
#: Pairs "B MUST be null when A is null, MUST NOT be null when A is not null".
NULL_TOGETHER = [
    ("PricingQuantity", "PricingUnit"),
    ("ConsumedQuantity", "ConsumedUnit"),
    ("RegionId", "RegionName"),
    ("ResourceId", "ResourceType"),
    ("SubAccountId", "SubAccountName"),
]
DATETIME_TEXT = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"
)  # DateTimeFormat: 'YYYY-MM-DDTHH:mm:ssZ'
#: NumericFormat: integer, decimal or "mEn"; a single '.', no '+' sign, no commas, no symbols.
NUMERIC_TEXT = re.compile(r"^-?\d+(\.\d+)?(E-?\d+)?$")
PASCAL = re.compile(r"^[A-Z][A-Za-z0-9]*$")
#: UnitFormat "<singular-unit>-<plural-time-units>" (e.g. "GB-Hours").
UNIT = re.compile(r"^[A-Za-z]+-(Seconds|Minutes|Hours|Days|Weeks|Months|Years)$")


# --- the files ----------------------------------------------------------------------------------


def _fetch(engine: Engine, window: dict[str, str]) -> dict[str, bytes]:
    files = {}
    for base in serve(engine):
        for fmt in ("csv", "parquet"):
            r = httpx.get(f"{base}/export/focus.{fmt}", params={**window, "focusVersion": "1.2"}, timeout=120)
            assert r.status_code == 200, r.text
            files[fmt] = r.content
    return files


@pytest.fixture
def demo_files(engine: Engine) -> dict[str, bytes]:
    load_demo_fleet(engine)
    return _fetch(engine, {"start": DEMO_START.isoformat(), "end": DEMO_END.isoformat()})


@pytest.fixture
def billed_files(engine: Engine, ledger: None) -> dict[str, bytes]:  # noqa: F811
    return _fetch(engine, W)


def check_csv(content: bytes) -> pl.DataFrame:
    """The CSV's text checked for the value formats; returns it read as text (null = empty field)."""
    frame = pl.read_csv(io.BytesIO(content), infer_schema=False)
    for column in frame.columns:
        values = frame[column].drop_nulls()
        if column in DATETIME:
            assert values.str.contains(DATETIME_TEXT.pattern).all(), column
        elif column in DECIMAL:
            assert values.str.contains(NUMERIC_TEXT.pattern).all(), column
        elif column in JSON:
            for text in values:
                check_key_value(text)
    return frame


def check_key_value(text: str) -> None:
    """KeyValueFormat: a serialized JSON object, unique keys, values number/string/true/false/null."""
    pairs = json.loads(text, object_pairs_hook=list)
    assert isinstance(pairs, list), text
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), text
    assert all(v is None or isinstance(v, str | int | float | bool) for _, v in pairs), text


def check_parquet(content: bytes) -> pl.DataFrame:
    """The Parquet file's types: Decimal for Decimal columns (money exact), UTC instants for
    Date/Time, strings for String and JSON columns."""
    frame = pl.read_parquet(io.BytesIO(content))
    for column, dtype in frame.schema.items():
        if column in DECIMAL:
            assert dtype == pl.Decimal(38, 9), column
        elif column in DATETIME:
            assert dtype == pl.Datetime("us", "UTC"), column
        elif column in STRING | JSON:
            assert dtype == pl.String, column
    return frame


def check_rows(frame: pl.DataFrame) -> None:
    """The column requirements on one file's rows (text or typed)."""
    columns = frame.columns
    # Column Handling: FOCUS columns are the spec's ids; custom ones carry the x_ prefix, come after.
    focus = [c for c in columns if not c.startswith("x_")]
    assert columns == focus + [c for c in columns if c.startswith("x_")]
    assert set(focus) <= FOCUS_1_2, set(focus) - FOCUS_1_2
    assert all(PASCAL.match(c) and len(c) <= 50 for c in focus)
    assert all(PASCAL.match(c[2:]) for c in columns if c.startswith("x_"))
    assert set(columns) >= MANDATORY, MANDATORY - set(columns)
    assert frame.height > 0
    rows = list(frame.iter_rows(named=True))
    for x in rows:
        check_row(x)


def check_row(x: dict[str, Any]) -> None:
    for column in NOT_NULL & x.keys():
        assert x[column] is not None, column
        if column in STRING:  # StringHandling: no empty or blank values in not-nullable strings
            assert str(x[column]).strip(), column
    for column, allowed in ALLOWED.items():
        if column in x and x[column] is not None:
            assert x[column] in allowed, (column, x[column])
    assert SUBCATEGORY_PARENT[x["ServiceSubcategory"]] == x["ServiceCategory"]
    if x["ChargeCategory"] == "Purchase":
        assert x["ChargeFrequency"] != "Usage-Based"
    usage = x["ChargeCategory"] in ("Usage", "Purchase") and x["ChargeClass"] != "Correction"
    if usage:
        for column in NOT_NULL_FOR_USAGE & x.keys():
            if column != "ConsumedQuantity" or x["ChargeCategory"] == "Usage":
                assert x[column] is not None, column
    for a, b in NULL_TOGETHER:
        if a in x:
            assert (x[a] is None) == (x[b] is None), (a, b)
    if "SkuMeter" in x and x["SkuId"] is None:
        assert x["SkuMeter"] is None
    # ResourceName MUST NOT duplicate a system-generated ResourceId.
    assert x["ResourceName"] is None or x["ResourceName"] != x["ResourceId"]
    for unit in ("PricingUnit", "ConsumedUnit"):
        assert x[unit] is None or UNIT.match(x[unit]), x[unit]
    # CurrencyFormat: a national currency's ISO 4217 three-letter code (XXX is "no currency").
    assert re.fullmatch(r"[A-Z]{3}", x["BillingCurrency"]) and x["BillingCurrency"] != "XXX"
    money = {k: Decimal(str(x[k])) for k in DECIMAL & x.keys() if x[k] is not None}
    # ListUnitPrice / ContractedUnitPrice: non-negative; × PricingQuantity = the cost (to within the
    # rounding of a unit price to 1e-9: half a nano per unit of quantity).
    for unit_price, cost in (("ListUnitPrice", "ListCost"), ("ContractedUnitPrice", "ContractedCost")):
        if unit_price in money and "PricingQuantity" in money:
            assert money[unit_price] >= 0
            assert abs(money[unit_price] * money["PricingQuantity"] - money[cost]) <= (
                Decimal("0.0000000005") * money["PricingQuantity"] + Decimal("1e-18")
            ), (unit_price, x)
    # Charge and billing periods: [start, end), the charge inside its billing period.
    start, end = instant(x["ChargePeriodStart"]), instant(x["ChargePeriodEnd"])
    billing_start, billing_end = instant(x["BillingPeriodStart"]), instant(x["BillingPeriodEnd"])
    assert start < end and billing_start <= start and end <= billing_end
    assert end - start == dt.timedelta(hours=1)
    assert billing_start.day == 1 and billing_start.time() == dt.time(0)
    # EffectiveCost of a charge that covers no future charges is its own; no purchase here, so
    # EffectiveCost ≤ ListCost only where the bill says so — and ContractedCost defaults to ListCost.
    assert money["ContractedCost"] == money["ListCost"]


def instant(value: Any) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(value)


def check_files(files: dict[str, bytes]) -> None:
    text = check_csv(files["csv"])
    typed = check_parquet(files["parquet"])
    check_rows(text)
    check_rows(typed)
    assert text.columns == typed.columns and text.height == typed.height
    # The typed file holds the very values the text shows.
    assert typed["BilledCost"].to_list() == [Decimal(v) for v in text["BilledCost"]]


def test_the_demo_fleets_1_2_export_meets_the_column_requirements(demo_files: dict[str, bytes]) -> None:
    check_files(demo_files)


def test_the_billed_ledgers_1_2_export_meets_the_column_requirements(billed_files: dict[str, bytes]) -> None:
    check_files(billed_files)


def test_the_checks_catch_what_they_check(demo_files: dict[str, bytes]) -> None:
    """Each check fails on a file broken the way it guards against (so none passes vacuously)."""
    good = pl.read_csv(io.BytesIO(demo_files["csv"]), infer_schema=False)
    broken = [
        good.drop("BilledCost"),  # a Mandatory column missing
        good.rename({"x_GpuHours": "GpuHours"}),  # a custom column without x_
        good.with_columns(pl.lit("Usage-based").alias("ChargeFrequency")),  # not an allowed value
        good.with_columns(
            pl.lit("Virtual Machines").alias("ServiceSubcategory"), pl.lit("Storage").alias("ServiceCategory")
        ),  # fmt: skip
        good.with_columns(pl.lit(None, pl.String).alias("SkuPriceId")),  # null on a usage row
        good.with_columns(pl.lit(None, pl.String).alias("PricingUnit")),  # unit without quantity
        good.with_columns(
            (pl.col("ListUnitPrice").cast(pl.Float64) + 0.01).cast(pl.String)
        ),  # price × quantity
        good.with_columns(pl.col("ChargePeriodStart").alias("ChargePeriodEnd")),  # empty period
        good.with_columns(pl.lit("").alias("ProviderName")),  # blank not-nullable string
    ]
    for frame in broken:
        with pytest.raises(AssertionError):
            check_rows(frame)
    sink = io.BytesIO()
    good.with_columns(pl.col("BilledCost").str.replace(r"\.", ",")).write_csv(sink)
    with pytest.raises(AssertionError):
        check_csv(sink.getvalue())  # a comma as decimal mark
    with pytest.raises(AssertionError):
        check_key_value('{"a": 1, "a": 2}')
    with pytest.raises(AssertionError):
        check_key_value('{"a": {"nested": true}}')
