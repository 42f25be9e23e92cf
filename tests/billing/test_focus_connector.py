"""The ``focus`` billing connector on the FOCUS 1.1 multi-cloud fixture (and its 1.0, 1.2, Parquet and
gzip variants): every total of fixtures/README.md reproduced exactly, per provider."""

from __future__ import annotations

import datetime as dt
import gzip
import logging
import zipfile
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import polars as pl
import pytest

from connectors.billing import BILLING_SCHEMA, BillingBatch, BillingSource
from connectors.focus import FOCUS_1_1_ADDED, FOCUS_1_2_ADDED, FocusConfig, FocusConnector, detect_version
from service.billing.catalog import fill_gpus

FIXTURE = Path(__file__).parent.parent / "fixtures" / "focus" / "focus_1.1_multicloud_2025-09.csv"
SEPT = (dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC))
D = Decimal
NANO = D("0.000000001")


def connector(path: Path) -> FocusConnector:
    return FocusConnector(FocusConfig(name="bills", type="focus", path=str(path)))


def only_batch(path: Path) -> BillingBatch:
    batches = list(connector(path).read(*SEPT))
    assert len(batches) == 1 and isinstance(batches[0], BillingBatch)
    return batches[0]


def raw_frame() -> pl.DataFrame:
    return pl.read_csv(FIXTURE, infer_schema=False)


def sums(lines: pl.DataFrame, *columns: str) -> dict[str, dict[str, Decimal]]:
    agg = lines.group_by("provider").agg(pl.col(c).sum() for c in columns)
    return {r["provider"]: {c: r[c] for c in columns} for r in agg.iter_rows(named=True)}


def gpu_instance_effective(lines: pl.DataFrame) -> dict[str, Decimal]:
    """Effective cost of the lines of resources that have GPUs: AWS/Azure lines with a GPU count,
    GCP every line (core, RAM, SSD, credit) of a resource that has a GPU SKU row."""
    has_gpu_sku = pl.col("is_gpu_sku").fill_null(False).any().over("resource_id")
    subset = lines.filter(
        pl.col("resource_id").is_not_null()
        & (
            ((pl.col("provider") != "gcp") & (pl.col("gpu_count").fill_null(0) > 0))
            | ((pl.col("provider") == "gcp") & has_gpu_sku)
        )
    )
    return {p: v["effective_cost"] for p, v in sums(subset, "effective_cost").items()}


def fixture_sum(column: str, provider: str) -> Decimal:
    """Σ of the fixture's text, each value rounded half-even to 1e-9 the way Decimal(38, 9) does."""
    rows = raw_frame().filter(pl.col("ProviderName") == provider)[column].to_list()
    return sum((D(v).quantize(NANO, rounding=ROUND_HALF_EVEN) for v in rows), D(0))


def assert_fixture_totals(batch: BillingBatch) -> None:
    lines = batch.lines
    assert batch.read == 194 and batch.lines.height == 194 and batch.refused == [] and batch.skipped == 0
    assert dict(lines.group_by("provider").len().iter_rows()) == {"aws": 107, "gcp": 12, "azure": 75}
    got = sums(lines, "billed_cost", "effective_cost", "list_cost", "gpu_hours")
    assert got["aws"] == {
        "billed_cost": D("32593.3144"),
        "effective_cost": D("32593.3144"),
        "list_cost": D("72630.40"),
        "gpu_hours": D(7520),
    }
    assert got["azure"] == {
        "billed_cost": D("70066.272"),
        "effective_cost": D("70066.272"),
        "list_cost": D("139676.832"),
        "gpu_hours": D(8016),
    }
    # GCP rows carry 12 decimals: each is rounded to 1e-9 (half-even), so the sum is the rounded
    # rows' sum exactly, and within 1e-6 of the README's 1,449.603467945205.
    gcp = got["gcp"]
    assert gcp["gpu_hours"] == D(140)
    for column in ("billed_cost", "effective_cost", "list_cost"):
        assert (
            gcp[column] == fixture_sum(column.title().replace("_", ""), "Google Cloud") == D("1449.603467946")
        )
        assert abs(gcp[column] - D("1449.603467945205")) <= D("1e-6")
    usage = sums(lines.filter(pl.col("charge_category") == "Usage"), "list_cost")
    assert usage["aws"]["list_cost"] == D("44890.24")
    assert usage["azure"]["list_cost"] == D("94864.032")
    assert abs(usage["gcp"]["list_cost"] - D("1626.563467945205")) <= D("1e-6")
    assert lines["gpu_hours"].sum() == D(15676)


def test_focus_1_1_fixture_reproduces_every_readme_total(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="connectors.focus")
    batch = only_batch(FIXTURE.parent)
    assert isinstance(connector(FIXTURE), BillingSource)
    assert dict(batch.lines.schema) == BILLING_SCHEMA
    assert_fixture_totals(batch)
    assert "FOCUS 1.1 export" in caplog.text
    assert (batch.period_start, batch.period_end) == SEPT
    assert batch.lines["line_no"].to_list() == list(range(2, 196))
    assert batch.lines["line_key"].n_unique() == 194


def test_gpu_instance_effective_cost_is_what_the_acceptance_check_expects() -> None:
    got = gpu_instance_effective(only_batch(FIXTURE).lines)
    assert got["aws"] == D("32449.3144")  # 3,302.40 + 27,740.16 + 1,134.40 + 272.3544
    # Azure: the unused reservation (746.88) has no resource, so the VMs are 69,943.392 − 746.88.
    assert got["azure"] == D("69196.512")
    # GCP: G1 1,617.803491945205 + G2 8.759976 − 176.96 credits, rows rounded to 1e-9.
    assert abs(got["gcp"] - D("1449.603467945205")) <= D("1e-6")


def test_line_mapping_per_provider() -> None:
    lines = only_batch(FIXTURE).lines

    def one(**where: object) -> dict[str, object]:
        rows = lines.filter(*(pl.col(k) == v for k, v in where.items())).head(1).to_dicts()
        assert rows, where
        return rows[0]

    covered = one(resource_id="i-0a7c3f1e9d5b2c402", charge_start=SEPT[0])
    assert covered["provider"] == "aws" and covered["account"] == "111122223333"
    assert covered["billing_account"] == "999988887777"
    assert covered["charge_end"] == SEPT[0] + dt.timedelta(days=1)
    assert (covered["billed_cost"], covered["effective_cost"], covered["list_cost"]) == (
        D(0),
        D("924.672"),
        D("1320.96"),
    )
    assert covered["pricing_model"] == "commitment" and covered["commitment_id"].startswith(
        "arn:aws:savingsplans"
    )
    assert (covered["instance_type"], covered["gpu_count"], covered["gpu_hours"]) == (
        "p5.48xlarge",
        8,
        D(192),
    )
    assert covered["tags"] == '{"team": "llm-research", "project": "pretrain-70b", "cost-center": "cc-1042"}'
    fee = one(provider="aws", charge_category="Purchase", charge_start=SEPT[0])
    assert (fee["billed_cost"], fee["effective_cost"], fee["pricing_model"], fee["gpu_hours"]) == (
        D("924.672"),
        D(0),
        None,
        None,
    )
    spot = one(resource_id="i-09f3a6c8e1d7b2504", charge_start=dt.datetime(2025, 9, 20, tzinfo=dt.UTC))
    assert (spot["pricing_model"], spot["effective_cost"], spot["gpu_hours"]) == ("spot", D("54.4512"), D(96))

    gpu = one(
        provider="gcp",
        charge_category="Usage",
        is_gpu_sku=True,
        charge_start=dt.datetime(2025, 9, 8, tzinfo=dt.UTC),
    )
    assert gpu["resource_id"] == "4815162342108301234"  # from //compute…/instances/<numeric id>
    assert (gpu["usage_quantity"], gpu["gpu_hours"], gpu["instance_type"]) == (D(64), D(64), "a3-highgpu-8g")
    assert gpu["sku_description"] == "Nvidia H100 80GB GPU running in Americas"
    credit = one(provider="gcp", charge_category="Credit")
    assert (credit["resource_id"], credit["effective_cost"], credit["gpu_hours"]) == (
        "4815162342108301234",
        D("-176.96"),
        D(0),
    )
    core = one(provider="gcp", sku_description="A3 Instance Core running in Americas")
    assert (core["is_gpu_sku"], core["gpu_hours"], core["usage_quantity"]) == (None, D(0), D(1664))

    reserved = one(provider="azure", pricing_model="commitment", charge_type="Usage")
    assert reserved["resource_id"] == (
        "/subscriptions/6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f/resourcegroups/rg-ml-train"
        "/providers/microsoft.compute/virtualmachines/ndh100-train-01"
    )
    assert (reserved["billed_cost"], reserved["effective_cost"], reserved["gpu_hours"]) == (
        D(0),
        D("1493.76"),
        D(192),
    )
    unused = one(charge_type="UnusedReservation")
    assert unused["resource_id"] is None and unused["usage_quantity"] is None
    assert (unused["billed_cost"], unused["effective_cost"], unused["gpu_hours"]) == (D(0), D("746.88"), D(0))
    assert unused["instance_type"] == "Standard_ND96isr_H100_v5"
    purchase = one(provider="azure", charge_category="Purchase")
    assert (purchase["billed_cost"], purchase["effective_cost"]) == (D("44812.8"), D(0))


def test_focus_1_0_falls_back_to_instance_types_and_the_catalog(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="connectors.focus")
    path = tmp_path / "focus_1.0.csv"
    raw_frame().drop(FOCUS_1_1_ADDED).write_csv(path)
    assert detect_version(pl.read_csv(path, n_rows=0).columns) == "1.0"
    lines = only_batch(path).lines
    assert "FOCUS 1.0 export" in caplog.text
    # No SkuPriceDetails: the instance type comes from x_UsageType (AWS) / x_SkuDetails (Azure),
    # the count from the catalog, which the billing ingestor applies (fill_gpus).
    assert lines["gpu_count"].is_null().all()
    types = lines.filter(pl.col("resource_id") == "i-0d1e4c9a2f7b3e801")["instance_type"].unique()
    assert types.to_list() == ["p5.48xlarge"]
    filled = fill_gpus(lines)
    assert dict(filled.group_by("provider").agg(pl.col("gpu_hours").sum()).iter_rows()) == {
        "aws": D(7520),
        "gcp": D(140),  # GPU SKU rows found by x_SkuDescription
        "azure": D(8016),
    }
    got = gpu_instance_effective(filled)
    assert (got["aws"], got["azure"]) == (D("32449.3144"), D("69196.512"))


def test_focus_1_2_columns_are_detected_and_read(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="connectors.focus")
    frame = raw_frame()
    added = {
        "BillingAccountType": "Billing Account",
        "SubAccountType": "Account",
        "InvoiceId": "INV-2025-09",
        "PricingCurrency": "USD",
        "PricingCurrencyContractedUnitPrice": None,
        "PricingCurrencyEffectiveCost": None,
        "PricingCurrencyListUnitPrice": None,
    }
    assert tuple(added) == FOCUS_1_2_ADDED
    frame = frame.with_columns(pl.lit(v, dtype=pl.String).alias(k) for k, v in added.items())
    frame = frame.with_columns(pl.col("EffectiveCost").alias("PricingCurrencyEffectiveCost"))
    path = tmp_path / "focus_1.2.csv"
    frame.write_csv(path)
    assert_fixture_totals(only_batch(path))
    assert "FOCUS 1.2 export" in caplog.text


def test_parquet_and_gzip_give_the_same_lines(tmp_path: Path) -> None:
    csv = only_batch(FIXTURE).lines
    money = ["BilledCost", "EffectiveCost", "ListCost", "ContractedCost"]
    times = ["ChargePeriodStart", "ChargePeriodEnd", "BillingPeriodStart", "BillingPeriodEnd"]
    typed = raw_frame().with_columns(
        *(pl.col(c).cast(pl.Decimal(38, 12)) for c in money),
        pl.col("ConsumedQuantity").cast(pl.Float64),  # as a float: read back through its shortest text
        *(pl.col(c).str.to_datetime("%Y-%m-%dT%H:%M:%SZ", time_zone="UTC") for c in times),
    )
    (tmp_path / "pq").mkdir()
    typed.write_parquet(tmp_path / "pq" / "focus.parquet")
    (tmp_path / "gz").mkdir()
    (tmp_path / "gz" / "focus.csv.gz").write_bytes(gzip.compress(FIXTURE.read_bytes()))
    for variant in ("pq", "gz"):
        batch = only_batch(tmp_path / variant)
        assert_fixture_totals(batch)
        keep = [c for c in BILLING_SCHEMA if c not in ("source_file", "line_no", "line_key")]
        assert batch.lines.select(keep).equals(csv.select(keep)), variant
    # a Parquet record's number is its 1-based row; a CSV record's, its line (the header is line 1)
    assert only_batch(tmp_path / "pq").lines["line_no"].to_list() == list(range(1, 195))
    # the key hashes the record's text: the same in CSV and gzip, another text in Parquet
    gz = only_batch(tmp_path / "gz").lines
    assert gz["line_key"].to_list() == csv["line_key"].to_list()


def test_files_outside_the_window_are_not_read(tmp_path: Path) -> None:
    (tmp_path / "2025-09").mkdir()
    (tmp_path / "2025-09" / "focus.csv").write_bytes(FIXTURE.read_bytes())
    (tmp_path / "notes.txt").write_text("not an export")
    focus = connector(tmp_path)
    october = (dt.datetime(2025, 10, 1, tzinfo=dt.UTC), dt.datetime(2025, 11, 1, tzinfo=dt.UTC))
    assert list(focus.read(*october)) == []
    assert [b.source_file for b in focus.read(*SEPT)] == [str(tmp_path / "2025-09" / "focus.csv")]


def test_a_zipped_focus_export_imports_like_the_plain_file(tmp_path: Path) -> None:
    """A Data Export delivered as a ZIP of one (gzipped) CSV is unpacked, in a directory as well as
    named explicitly: the same 194 lines as the plain file, labelled by the archive."""
    folder = tmp_path / "exports"
    folder.mkdir()
    archive = folder / "focus-2025-09.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("part-0001.csv.gz", gzip.compress(FIXTURE.read_bytes()))
    (folder / "README.txt").write_text("not an export")
    plain = only_batch(FIXTURE).lines.drop("source_file")
    for path in (folder, archive):
        batch = only_batch(path)
        assert_fixture_totals(batch)
        assert batch.source_file == str(archive)
        assert batch.lines.drop("source_file").equals(plain)
