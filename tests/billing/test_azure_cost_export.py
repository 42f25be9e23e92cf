"""azure_cost on the September 2025 EA amortized fixture and its header variants (MCA camelCase
with a BOM and ISO dates, legacy pay-as-you-go), with the totals of fixtures/README.md."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from pydantic import ValidationError

from connectors.azure_cost import AzureCostConfig, AzureCostConnector
from connectors.billing import BillingSource
from service.billing.catalog import fill_gpus

EA = Path(__file__).parent.parent / "fixtures" / "azure" / "ea_amortized_cost_2025-09.csv"
SEP = dt.datetime(2025, 9, 1, tzinfo=dt.UTC)
OCT = dt.datetime(2025, 10, 1, tzinfo=dt.UTC)
A1 = (
    "/subscriptions/6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f/resourcegroups/rg-ml-train/providers/"
    "microsoft.compute/virtualmachines/ndh100-train-01"
)


def read(path: Path, dataset: str | None = None) -> list:
    config = AzureCostConfig(name="bills", type="azure_cost", path=str(path), dataset=dataset)
    return list(AzureCostConnector(config).read(SEP, OCT))


def assert_fixture_totals(lines: pl.DataFrame) -> None:
    lines = fill_gpus(lines)
    assert lines.height == 74
    gpu_vms = lines.filter(pl.col("instance_type") == "Standard_ND96isr_H100_v5")
    used = gpu_vms.filter(pl.col("charge_type") == "Usage")
    assert used["gpu_hours"].sum() == Decimal("8016") and used["usage_quantity"].sum() == Decimal("1002")
    assert gpu_vms["effective_cost"].sum() == Decimal("69943.392")
    assert used["effective_cost"].sum() == Decimal("69196.512")
    assert lines["effective_cost"].sum() == Decimal("70066.272")
    assert used["list_cost"].sum() == Decimal("94741.152")
    unused = lines.filter(pl.col("charge_type") == "UnusedReservation").row(0, named=True)
    assert unused["charge_start"] == dt.datetime(2025, 9, 15, tzinfo=dt.UTC)
    assert unused["charge_end"] == dt.datetime(2025, 9, 16, tzinfo=dt.UTC)
    assert (unused["usage_quantity"] * unused["gpu_count"], unused["effective_cost"]) == (
        96,
        Decimal("746.88"),
    )
    assert (unused["resource_id"], unused["resource_name"], unused["tags"], unused["gpu_hours"]) == (
        None,
        None,
        None,
        0,
    )
    assert (unused["charge_category"], unused["pricing_model"]) == ("Usage", "commitment")
    assert unused["commitment_id"] == "8ecdb00f-6733-c3d3-31bd-5953e8e6543f"
    a1 = lines.filter(pl.col("resource_id") == A1)
    assert a1.height == 30 and a1["gpu_hours"].sum() == Decimal("5664")
    assert a1["pricing_model"].unique().to_list() == ["commitment"]
    assert a1["billed_cost"].sum() == 0 and a1["effective_cost"].sum() == Decimal("44065.92")  # RI: billed 0
    assert a1["tags"][0] == '{"team": "llm-research","project": "pretrain-70b","cost-center": "cc-1042"}'
    spot = lines.filter(pl.col("pricing_model") == "spot")
    assert (spot["usage_quantity"].sum(), spot["effective_cost"].sum(), spot["billed_cost"].sum()) == (
        48,
        Decimal("943.872"),
        Decimal("943.872"),
    )
    disk = lines.filter(pl.col("service") == "Storage")
    assert (disk.height, disk["effective_cost"].sum(), disk["instance_type"].null_count()) == (
        30,
        Decimal("122.88"),
        30,
    )


def test_ea_amortized_export_reproduces_the_readme_totals() -> None:
    (batch,) = read(EA)
    assert isinstance(
        AzureCostConnector(AzureCostConfig(name="b", type="azure_cost", path=str(EA))), BillingSource
    )
    assert (batch.read, batch.lines.height, batch.refused, batch.skipped) == (74, 74, [], 0)
    assert (batch.period_start, batch.period_end) == (SEP, OCT)
    assert_fixture_totals(batch.lines)
    first = batch.lines.row(0, named=True)
    assert (first["provider"], first["account"], first["billing_account"], first["region"]) == (
        "azure",
        "6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f",
        "12345678",
        "eastus",
    )
    assert (first["line_no"], first["usage_unit"], first["currency"], first["service"]) == (
        2,
        "Hour",
        "USD",
        "Virtual Machines",
    )
    assert batch.lines["line_key"].n_unique() == 74


def test_mca_camel_case_header_with_bom_and_iso_dates(tmp_path: Path) -> None:
    header, rest = EA.read_text().split("\n", 1)
    camel = ",".join(c[0].lower() + c[1:] if c != "PayGPrice" else c for c in header.split(","))
    camel = camel.replace("billingCurrencyCode", "billingCurrency").replace("reservationId", "benefitId")
    rest = re.sub(r"(\d\d)/(\d\d)/(\d{4})", r"\3-\1-\2", rest)
    (tmp_path / "mca.csv").write_bytes(b"\xef\xbb\xbf" + (camel + "\n" + rest).encode())
    (batch,) = read(tmp_path)
    assert (batch.read, batch.refused, batch.period_start, batch.period_end) == (74, [], SEP, OCT)
    assert_fixture_totals(batch.lines)


def test_payg_legacy_header_and_unit_blocks(tmp_path: Path) -> None:
    (tmp_path / "payg.csv").write_text(
        "SubscriptionGuid,ResourceGroup,ResourceLocation,UsageDateTime,MeterCategory,MeterSubcategory,MeterId,"
        "MeterName,MeterRegion,UsageQuantity,ResourceRate,PreTaxCost,ConsumedService,ResourceType,InstanceId,"
        "Tags,OfferId,AdditionalInfo,ServiceInfo1,ServiceInfo2,Currency,UnitOfMeasure,PayGPrice\n"
        "sub-1,rg,East US,2025-09-03T00:00:00.0000000Z,Virtual Machines,NCadsA100v4 Series,m1,"
        "NC24ads A100 v4,US East,2.4,36.73,88.152,Microsoft.Compute,virtualMachines,"
        "/subscriptions/SUB-1/resourceGroups/RG/providers/"
        'Microsoft.Compute/virtualMachines/VM-A,"{""team"": ""x""}",MS-AZR-0003P,,,,EUR,10 Hours,36.73\n'
    )
    (batch,) = read(tmp_path)
    row = fill_gpus(batch.lines).row(0, named=True)
    assert (row["resource_id"], row["resource_name"]) == (
        "/subscriptions/sub-1/resourcegroups/rg/providers/microsoft.compute/virtualmachines/vm-a",
        "VM-A",
    )
    # no AdditionalInfo: the VM size comes from the meter name; 2.4 blocks of 10 hours = 24 instance-hours
    assert (row["instance_type"], row["usage_quantity"], row["usage_unit"], row["gpu_hours"]) == (
        "Standard_NC24ads_A100_v4",
        24,
        "Hour",
        24,
    )
    assert (row["effective_cost"], row["billed_cost"], row["list_cost"], row["currency"]) == (
        Decimal("88.152"),
        Decimal("88.152"),
        Decimal("88.152"),
        "EUR",
    )
    assert (row["charge_category"], row["charge_type"], row["pricing_model"], row["tags"]) == (
        "Usage",
        "Usage",
        "on_demand",
        '{"team": "x"}',
    )
    assert (row["charge_start"], batch.period_start) == (dt.datetime(2025, 9, 3, tzinfo=dt.UTC), None)


def test_actual_dataset_keeps_the_cost_as_billed(tmp_path: Path) -> None:
    (tmp_path / "export.csv").write_bytes(EA.read_bytes())
    (batch,) = read(tmp_path, dataset="actual")
    a1 = batch.lines.filter(pl.col("resource_id") == A1)
    assert a1["billed_cost"].sum() == a1["effective_cost"].sum() == Decimal("44065.92")
    (detected,) = read(tmp_path)  # the unused reservation row marks the amortized dataset
    assert detected.lines.filter(pl.col("resource_id") == A1)["billed_cost"].sum() == 0


def test_config_needs_a_path() -> None:
    with pytest.raises(ValidationError, match="path"):
        AzureCostConfig(name="b", type="azure_cost")
    with pytest.raises(ValidationError, match="dataset"):
        AzureCostConfig(name="b", type="azure_cost", path="/x", dataset="both")
