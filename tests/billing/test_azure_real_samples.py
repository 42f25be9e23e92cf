"""``azure_cost`` on public Azure cost exports (project-koku's test data, Apache-2.0; the FinOps
toolkit's EA exports, MIT; tests/fixtures/public/azure): read = accepted + refused, a row refused
only when its money or currency cannot be read, and each subscription's billed and effective totals
equal an independent sum of the file (``csv`` + ``Decimal``, not the connector)."""

from __future__ import annotations

import csv
import datetime as dt
import re
from collections import defaultdict
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import polars as pl
import pytest

from connectors.azure_cost import AzureCostConfig, AzureCostConnector
from connectors.billing import BillingBatch

SAMPLES = Path(__file__).parents[1] / "fixtures" / "public" / "azure"
WIDE = (dt.datetime(2000, 1, 1, tzinfo=dt.UTC), dt.datetime(2099, 1, 1, tzinfo=dt.UTC))
NANO = Decimal("1e-9")
ISO_CURRENCIES = {"USD", "EUR", "NOK"}  # those the samples bill in (and MC, which is none)
#: what each header means, whatever the export calls it (an independent list, lower-cased)
NAMES = {
    "subscription": ("subscriptionid", "subscriptionguid"),
    "cost": ("costinbillingcurrency", "pretaxcost", "cost"),
    "currency": ("billingcurrencycode", "billingcurrency", "currency"),
    "charge": ("chargetype",),
    "pricing": ("pricingmodel",),
}


def read(path: Path) -> BillingBatch:
    config = AzureCostConfig(name="costs", type="azure_cost", path=str(path))
    (batch,) = AzureCostConnector(config).read(*WIDE)
    assert isinstance(batch, BillingBatch)
    return batch


def records(path: Path) -> list[dict[str, str]]:
    """The file's rows keyed by meaning (``NAMES``); a localized header ``Kosten (Cost)`` is its
    name in parentheses."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        rows = list(csv.reader(handle))
    english = [(m.group(1) if (m := re.search(r"\((\w+)\)\s*$", h)) else h).lower() for h in rows[0]]
    out = []
    for row in rows[1:]:
        by_name = dict(zip(english, row, strict=True))
        out.append(
            {
                meaning: next((by_name[n] for n in names if n in by_name), "")
                for meaning, names in NAMES.items()
            }
        )
    return out


def independent_totals(path: Path, amortized: bool) -> dict[str, tuple[Decimal, Decimal]]:
    """Per subscription: Σ billed and Σ effective of the rows whose currency is an ISO code, each
    row rounded half to even at 1e-9. The actual dataset bills what it costs; the amortized one
    (Microsoft's "amortized cost" export) bills commitment-covered usage and unused commitments at 0
    and spreads commitment purchases over the usage they cover (effective 0)."""
    totals: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0), Decimal(0)])
    for row in records(path):
        if row["currency"].upper() not in ISO_CURRENCIES:
            continue
        cost = Decimal(row["cost"]).quantize(NANO, ROUND_HALF_EVEN)
        charge = row["charge"].replace(" ", "").lower() or "usage"
        committed = row["pricing"].replace(" ", "").lower() in ("reservation", "savingsplan")
        covered_usage = charge in ("unusedreservation", "unusedsavingsplan") or (
            charge == "usage" and committed
        )
        billed = Decimal(0) if amortized and covered_usage else cost
        effective = Decimal(0) if amortized and charge == "purchase" and committed else cost
        totals[row["subscription"]][0] += billed
        totals[row["subscription"]][1] += effective
    return {s: (b, e) for s, (b, e) in totals.items()}


def imported_totals(batch: BillingBatch) -> dict[str, tuple[Decimal, Decimal]]:
    grouped = batch.lines.group_by("account").agg(pl.col("billed_cost").sum(), pl.col("effective_cost").sum())
    return {a: (b, e) for a, b, e in grouped.iter_rows()}


@pytest.mark.parametrize(
    ("name", "rows", "accepted", "amortized", "refused"),
    [
        ("koku/costreport_a243c6f2-199f-4074-9a2c-40e671cf1584.csv", 3, 3, False, set()),
        ("koku/azure_camelCased.csv", 3, 3, False, set()),
        ("koku/azure_version_2.csv", 5, 0, False, {"BillingCurrencyCode"}),  # "MC": no ISO code
        ("koku/camel_azure_version_2.csv", 4, 4, False, set()),
        ("finops-toolkit/EA_ActualCost_Small.csv", 11, 11, False, set()),
        ("finops-toolkit/EA_AmortizedCost_Small.csv", 28, 28, True, set()),
        ("localized/ea_actual_de_2023-09.csv", 11, 11, False, set()),
        ("localized/payg_es_2019-07.csv", 3, 3, False, set()),
        ("opencost/German.csv", 1, 1, False, set()),
        ("opencost/YA.csv", 1, 1, False, set()),
        ("opencost/PayAsYouGo.csv", 1, 1, False, set()),
        ("opencost/EnterpriseCamel.csv", 1, 1, False, set()),
        ("opencost/BOM.csv", 1, 0, False, {"PreTaxCost"}),  # a row of empty fields: no cost
        ("opencost/Enterprise.csv", 1, 0, False, {"Date"}),  # February usage in a May billing period
    ],
)
def test_rows_are_refused_only_when_they_cannot_be_booked_and_subscriptions_add_up(
    name: str, rows: int, accepted: int, amortized: bool, refused: set[str]
) -> None:
    path = SAMPLES / name
    batch = read(path)
    assert (batch.read, batch.lines.height, len(batch.refused), batch.skipped) == (
        rows,
        accepted,
        rows - accepted,
        0,
    )
    assert {r.column for r in batch.refused} == refused
    if batch.lines.height:
        assert imported_totals(batch) == independent_totals(path, amortized)


def test_opencost_header_sets() -> None:
    """OpenCost's Azure header sets (Apache-2.0): a real German export header with untranslated
    columns among translated ones (``ServiceName``, ``Currency``), a mix of camelCase and German
    (``YA``), ``100 Hours`` units; a row of empty fields refused for its cost, naming ``PreTaxCost``;
    a row dated outside its billing period refused (re-importing that period must not drop it)."""
    german, payg = read(SAMPLES / "opencost/German.csv"), read(SAMPLES / "opencost/PayAsYouGo.csv")
    content = [
        "account",
        "charge_start",
        "resource_id",
        "usage_quantity",
        "usage_unit",
        "billed_cost",
        "currency",
    ]
    assert german.lines.select(content).equals(payg.lines.select(content))
    assert german.lines.select("usage_quantity", "usage_unit").row(0) == (Decimal(300), "Hour")
    mixed = read(SAMPLES / "opencost/YA.csv")
    assert mixed.lines.select(content).equals(payg.lines.select(content))
    (empty,) = read(SAMPLES / "opencost/BOM.csv").refused
    assert (empty.line, empty.column, empty.reason, empty.cost) == (
        2,
        "PreTaxCost",
        "empty where a number is required: ''",
        None,
    )
    (outside,) = read(SAMPLES / "opencost/Enterprise.csv").refused
    assert (outside.column, outside.cost) == ("Date", Decimal(0))
    assert outside.reason == "starts before the row's billing period by more than 1 day: '02/02/2021'"


def test_a_currency_that_is_no_iso_code_refuses_its_rows_with_their_cost() -> None:
    path = SAMPLES / "koku/azure_version_2.csv"
    batch = read(path)
    assert [(r.line, r.column, r.reason, r.cost) for r in batch.refused] == [
        (line, "BillingCurrencyCode", "unknown currency code: 'MC'", Decimal(row["cost"]))
        for line, row in enumerate(records(path), start=2)
    ]
    assert sum(r.cost or 0 for r in batch.refused) == Decimal("19.998413754")


def test_finops_toolkit_exports_in_both_datasets() -> None:
    actual = read(SAMPLES / "finops-toolkit/EA_ActualCost_Small.csv")
    amortized = read(SAMPLES / "finops-toolkit/EA_AmortizedCost_Small.csv")
    assert actual.findings == [] and amortized.findings == []
    assert (actual.period_start, actual.period_end) == (
        dt.datetime(2023, 9, 1, tzinfo=dt.UTC),
        dt.datetime(2023, 10, 1, tzinfo=dt.UTC),
    )
    assert actual.lines["billed_cost"].sum() == actual.lines["effective_cost"].sum() == Decimal("8.545007787")
    assert amortized.lines["billed_cost"].sum() == Decimal("15.797780136")
    assert amortized.lines["effective_cost"].sum() == Decimal("16.296932136")
    # EA tags come without their braces: read as a JSON object
    tagged = amortized.lines.filter(pl.col("tags").is_not_null())["tags"][0]
    assert tagged.startswith('{"aks-managed-createOperationID": ""')


def test_legacy_usage_date_time_with_a_time_of_day() -> None:
    """Pay-as-you-go ``UsageDateTime`` ``2019-07-29 00:00:00`` (koku) reads as that day, as
    ``2019-07-29`` does (camelCase twin)."""
    legacy = read(SAMPLES / "koku/costreport_a243c6f2-199f-4074-9a2c-40e671cf1584.csv")
    twin = read(SAMPLES / "koku/azure_camelCased.csv")
    days = [dt.datetime(2019, 7, d, tzinfo=dt.UTC) for d in (29, 28, 28)]
    assert legacy.lines["charge_start"].to_list() == twin.lines["charge_start"].to_list() == days
    assert legacy.lines["charge_end"].to_list() == [d + dt.timedelta(days=1) for d in days]
