"""``azure_cost`` on localized headers (``Datum (Date)``, ``PreTaxCost (PreTaxCost)``): read by the
English name in parentheses, refusals and findings naming the column as the file spells it;
legacy and US dates; rows kept with findings; GPU-hours beyond a VM's GPUs flagged."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from connectors.azure_cost import AzureCostConfig, AzureCostConnector, header_map
from connectors.billing import BillingBatch
from connectors.sdk import Finding

PUBLIC = Path(__file__).parents[1] / "fixtures" / "public" / "azure"
GERMAN = PUBLIC / "localized" / "ea_actual_de_2023-09.csv"
ENGLISH = PUBLIC / "finops-toolkit" / "EA_ActualCost_Small.csv"
SPANISH = PUBLIC / "localized" / "payg_es_2019-07.csv"
PAYG = PUBLIC / "koku" / "costreport_a243c6f2-199f-4074-9a2c-40e671cf1584.csv"
WIDE = (dt.datetime(2000, 1, 1, tzinfo=dt.UTC), dt.datetime(2099, 1, 1, tzinfo=dt.UTC))
#: every column of a line but where it came from
CONTENT = [
    "account", "charge_start", "charge_end", "charge_category", "charge_type", "pricing_model",
    "commitment_id", "resource_id", "service", "sku", "instance_type", "region", "usage_quantity",
    "usage_unit", "billed_cost", "effective_cost", "list_cost", "currency", "tags",
]  # fmt: skip


def read(path: Path, **kwargs: object) -> BillingBatch:
    connector = AzureCostConnector(AzureCostConfig(name="costs", type="azure_cost", path=str(path)), **kwargs)  # type: ignore[arg-type]
    (batch,) = connector.read(*WIDE)
    assert isinstance(batch, BillingBatch)
    assert batch.read == batch.lines.height + len(batch.refused)
    return batch


def edit(source: Path, target: Path, line: int, english: str, value: str) -> None:
    """``source`` with the field of column ``english`` (``Kosten (Cost)`` is ``Cost``) on ``line``
    set to ``value``, written to ``target`` (BOM kept)."""
    raw = source.read_bytes()
    bom = b"\xef\xbb\xbf" if raw.startswith(b"\xef\xbb\xbf") else b""
    rows = list(csv.reader(io.StringIO(raw[len(bom) :].decode(), newline="")))
    at = next(i for i, h in enumerate(rows[0]) if h == english or h.endswith(f"({english})"))
    rows[line - 1][at] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    target.write_bytes(bom + out.getvalue().encode())


def test_header_map_reads_the_english_name_in_parentheses() -> None:
    columns = [
        "Datum (Date)",
        "PreTaxCost (PreTaxCost)",
        "Ubicación de los recursos (SubscriptionGuid)",
        "Moneda ( Currency )",
    ]
    columns += [
        "Etiquetas (Tags)",
        "Menge",
        "Nombre de departamento (DepartmentName)",
        "InstanceId (InstanceId)",
    ]
    assert header_map(columns) == {
        "Datum (Date)": "Date",
        "PreTaxCost (PreTaxCost)": "CostInBillingCurrency",
        "Ubicación de los recursos (SubscriptionGuid)": "SubscriptionId",
        "Moneda ( Currency )": "BillingCurrencyCode",
        "Etiquetas (Tags)": "Tags",
        "InstanceId (InstanceId)": "ResourceId",
        "Nombre de departamento (DepartmentName)": "DepartmentName",  # unused, but English too
    }
    # an English column and a localized one of the same name: the first is read, never both
    assert header_map(["Date", "Datum (Date)", "Cost"]) == {"Cost": "CostInBillingCurrency"}


@pytest.mark.parametrize(("localized", "english"), [(GERMAN, ENGLISH), (SPANISH, PAYG)])
def test_a_localized_export_gives_the_lines_of_its_english_original(localized: Path, english: Path) -> None:
    ours, theirs = read(localized), read(english)
    assert ours.refused == theirs.refused == [] and ours.findings == theirs.findings == []
    assert ours.lines.height == theirs.lines.height > 0
    assert ours.lines.select(CONTENT).equals(theirs.lines.select(CONTENT))
    assert (ours.period_start, ours.period_end) == (theirs.period_start, theirs.period_end)


def test_a_localized_export_read_in_small_chunks_gives_the_same_lines() -> None:
    config = AzureCostConfig(name="costs", type="azure_cost", path=str(GERMAN), chunk_rows=2)
    batches = list(AzureCostConnector(config).read(*WIDE))
    assert len(batches) > 2 and all(isinstance(b, BillingBatch) for b in batches)  # cut by size
    lines = pl.concat([b.lines for b in batches if isinstance(b, BillingBatch)])
    assert lines.select(CONTENT).equals(read(GERMAN).lines.select(CONTENT))


def test_refusals_and_findings_name_the_localized_column(tmp_path: Path) -> None:
    first, second = tmp_path / "a.csv", tmp_path / "de.csv"
    edit(GERMAN, first, 2, "Cost", "n/a")  # money unreadable: refused
    edit(first, second, 3, "Date", "31/31/2023")  # the date unreadable: refused
    edit(second, first, 4, "Quantity", "-1")  # negative usage: kept, flagged
    edit(first, second, 5, "ChargeType", "Gutschrift")  # unknown charge type: kept, flagged
    edit(second, first, 6, "PricingModel", "Spot Priority")  # unknown pricing model: kept, flagged
    edit(first, second, 7, "PayGPrice", "k.A.")  # list price unreadable: kept, flagged
    batch = read(second)
    assert [(r.line, r.column, r.reason) for r in batch.refused] == [
        (2, "Kosten (Cost)", "not a number: 'n/a'"),
        (3, "Datum (Date)", "not a timestamp: '31/31/2023'"),
    ]
    found = sorted((f.rule, f.column, f.examples) for f in batch.findings)
    assert found == [
        ("negative_usage", "Verbrauchte Menge (Quantity)", ((4, "-1"),)),
        ("not_a_number", "Preis für nutzungsbasierte Bezahlung (PayGPrice)", ((7, "k.A."),)),
        ("unknown_value", "Gebührentyp (ChargeType)", ((5, "Gutschrift"),)),
        ("unknown_value", "Preismodell (PricingModel)", ((6, "Spot Priority"),)),
    ]
    assert {f.provider for f in batch.findings} == {"azure"}
    by_line = {r["line_no"]: r for r in batch.lines.iter_rows(named=True)}
    assert (by_line[5]["charge_type"], by_line[5]["charge_category"]) == ("Gutschrift", "Adjustment")
    assert by_line[6]["pricing_model"] == "other" and by_line[7]["list_cost"] is None
    assert by_line[4]["usage_quantity"] == -1


def test_the_legacy_date_column_is_named_as_the_file_spells_it(tmp_path: Path) -> None:
    """Not ``Date`` (the name it is read by): ``UsageDateTime``, or its localized header."""
    for source, column in ((PAYG, "UsageDateTime"), (SPANISH, "UsageDateTime (UsageDateTime)")):
        edit(source, tmp_path / "bad.csv", 3, "UsageDateTime", "2019-07-32 00:00:00")
        batch = read(tmp_path / "bad.csv")
        assert [(r.line, r.column, r.reason) for r in batch.refused] == [
            (3, column, "not a timestamp: '2019-07-32 00:00:00'")
        ]
        assert batch.lines["charge_start"].to_list() == [
            dt.datetime(2019, 7, 29, tzinfo=dt.UTC),
            dt.datetime(2019, 7, 28, tzinfo=dt.UTC),
        ]


@pytest.mark.parametrize(
    "written",
    ["09/21/2023", "9/21/2023", "09/21/2023 00:00:00", "9/21/2023 12:00:00 AM", "2023-09-21 00:00:00"],
)
def test_dates_as_exports_and_spreadsheets_write_them(tmp_path: Path, written: str) -> None:
    edit(ENGLISH, tmp_path / "cost.csv", 2, "Date", written)
    batch = read(tmp_path / "cost.csv")
    assert batch.refused == []
    assert batch.lines.filter(pl.col("line_no") == 2)["charge_start"].to_list() == [
        dt.datetime(2023, 9, 21, tzinfo=dt.UTC)
    ]


_VM = '/subscriptions/sub-1/vm/a100-1,{charge},OnDemand,"{{""ServiceType"":""Standard_NC24ads_A100_v4""}}"'
GPU_VM = "".join(
    line + "\r\n"
    for line in (
        "SubscriptionId,Date,MeterCategory,MeterName,UnitOfMeasure,Quantity,CostInBillingCurrency,"
        "BillingCurrencyCode,ResourceId,ChargeType,PricingModel,AdditionalInfo",
        "sub-1,09/01/2025,Virtual Machines,NC24ads A100 v4,1 Hour,49.9,183.132,USD,"
        + _VM.format(charge="Usage"),
        "sub-1,09/02/2025,Virtual Machines,NC24ads A100 v4,1 Hour,24,88.08,USD," + _VM.format(charge="Usage"),
        "sub-1,09/03/2025,Virtual Machines,NC24ads A100 v4,1 Hour,-2,-7.34,USD,"
        + _VM.format(charge="Refund"),
    )
)


def test_gpu_hours_beyond_the_vms_gpus_are_flagged(tmp_path: Path) -> None:
    """49.9 GPU-hours in one day on a 1-GPU VM (NC24ads A100 v4): imported — the money is the
    bill's — and flagged ``gpu_hours_over_capacity`` on the file's quantity column."""
    path = tmp_path / "cost.csv"
    path.write_text(GPU_VM)
    batch = read(path, gpu_counts={"Standard_NC24ads_A100_v4": 1})
    assert batch.refused == [] and batch.lines.height == 3
    assert batch.findings == [
        Finding(
            str(path),
            "gpu_hours_over_capacity",
            "Quantity",
            "more GPU-hours than the instance's GPUs × the hours of the charge period",
            1,
            ((2, "49.900000000 GPU-h (1 GPU, 2025-09-01 00:00..2025-09-02 00:00)"),),
            "azure",
        )
    ]
    assert batch.lines["gpu_count"].to_list() == [1, 1, 1]
    assert batch.lines["gpu_hours"].to_list() == [Decimal("49.9"), Decimal(24), Decimal(0)]  # a refund: 0
    assert batch.lines["billed_cost"].sum() == Decimal("263.872")
    # without the operator's catalog the counts are left to the ingestor's, as before
    plain = read(path)
    assert plain.findings == [] and plain.lines["gpu_count"].null_count() == 3


def test_gpu_hours_findings_name_a_localized_quantity(tmp_path: Path) -> None:
    text = GPU_VM.replace("Quantity,", "Verbrauchte Menge (Quantity),", 1).replace(
        "Date,", "Datum (Date),", 1
    )
    (tmp_path / "de.csv").write_text(text)
    batch = read(tmp_path / "de.csv", gpu_counts={"standard_nc24ads_a100_v4": 1})
    assert [(f.rule, f.column, f.count) for f in batch.findings] == [
        ("gpu_hours_over_capacity", "Verbrauchte Menge (Quantity)", 1)
    ]


def test_the_ingestor_flags_gpu_hours_beyond_a_catalog_count(tmp_path: Path, sqlite_url: str) -> None:
    """Without ``gpu_counts`` the Azure export names no GPU count; the ingestor fills it from the
    bundled catalog (NC24ads A100 v4: 1 GPU) and then flags the 49.9 GPU-hour day — stored, with
    the file's spelling of the quantity column."""
    from sqlalchemy import text

    from service.billing.ingest import ingest_billing
    from service.db import make_engine

    path = tmp_path / "cost.csv"
    path.write_text(GPU_VM)
    connector = AzureCostConnector(AzureCostConfig(name="costs", type="azure_cost", path=str(path)))
    engine = make_engine(sqlite_url)
    try:
        result = ingest_billing(engine, "costs", connector, *WIDE, after_import=lambda *_: None)
        assert (result.read, result.accepted, result.refused, result.findings) == (3, 3, 0, 1)
        [finding] = result.files[0].finding_list
        assert (finding.rule, finding.column, finding.count, finding.examples) == (
            "gpu_hours_over_capacity",
            "Quantity",
            1,
            ((2, "49.900000000 GPU-h (1 GPU, 2025-09-01 00:00..2025-09-02 00:00)"),),
        )
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT rule, column_name, count FROM data_quality_finding")).all()
        assert [tuple(r) for r in rows] == [("gpu_hours_over_capacity", "Quantity", 1)]
    finally:
        engine.dispose()
