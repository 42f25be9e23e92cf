"""gcp_billing on the September 2025 fixtures: the totals of fixtures/README.md, exactly (gross cost
within 1e-6: the export's costs are floats, each row rounded to 1e-9)."""

from __future__ import annotations

import datetime as dt
import gzip
import shutil
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from pydantic import ValidationError

from connectors.billing import BillingSource
from connectors.gcp_billing import GcpBillingConfig, GcpBillingConnector

FIXTURES = Path(__file__).parent.parent / "fixtures" / "gcp"
JSONL = FIXTURES / "billing_export_resource_v1_2025-09.jsonl"
FLAT = FIXTURES / "billing_export_resource_v1_2025-09_flat.csv"
SEP = dt.datetime(2025, 9, 1, tzinfo=dt.UTC)
OCT = dt.datetime(2025, 10, 1, tzinfo=dt.UTC)
G1, G2 = "4815162342108301234", "7308425519386201977"


def connector(path: Path) -> GcpBillingConnector:
    return GcpBillingConnector(GcpBillingConfig(name="bills", type="gcp_billing", path=str(path)))


def read_all(path: Path, start: dt.datetime = SEP, end: dt.datetime = OCT) -> list:
    return list(connector(path).read(start, end))


def total(frame: pl.DataFrame, column: str) -> Decimal:
    return frame[column].sum()


def assert_fixture_totals(lines: pl.DataFrame) -> None:
    assert lines.height == 100
    assert total(lines, "gpu_hours") == Decimal("140")
    assert abs(total(lines, "list_cost") - Decimal("1626.563467945205")) <= Decimal("1e-6")
    assert abs(total(lines, "effective_cost") - Decimal("1449.603467945205")) <= Decimal("1e-6")
    assert total(lines, "effective_cost") - total(lines, "list_cost") == Decimal("-176.96")
    assert total(lines.filter(pl.col("is_gpu_sku")), "list_cost") == Decimal("1419.88")
    per = lines.group_by("resource_id").agg(pl.col("list_cost").sum(), pl.col("gpu_hours").sum(), pl.len())
    per = {r["resource_id"]: r for r in per.iter_rows(named=True)}
    assert set(per) == {G1, G2}
    assert abs(per[G1]["list_cost"] - Decimal("1617.803491945205")) <= Decimal("1e-6")
    assert per[G2]["list_cost"] == Decimal("8.759976")
    assert (per[G1]["gpu_hours"], per[G1]["len"], per[G2]["gpu_hours"], per[G2]["len"]) == (128, 64, 12, 36)


def test_jsonl_export_reproduces_the_readme_totals() -> None:
    (batch,) = read_all(JSONL)
    assert isinstance(connector(JSONL), BillingSource)
    assert (batch.read, batch.lines.height, batch.refused, batch.skipped) == (100, 100, [], 0)
    lines = batch.lines
    assert_fixture_totals(lines)
    assert lines["line_key"].n_unique() == 100
    assert lines["line_key"].str.contains(r"^sha1:[0-9a-f]{40}$").all()
    gpu = lines.filter(pl.col("is_gpu_sku"))
    assert gpu.height == 28 and gpu["sku_description"].unique().sort().to_list() == [
        "Nvidia H100 80GB GPU running in Americas",
        "Nvidia Tesla T4 GPU running in Americas",
    ]
    first = lines.row(0, named=True)
    assert first["charge_start"] == dt.datetime(2025, 9, 8, 16, tzinfo=dt.UTC)
    assert first["charge_end"] == dt.datetime(2025, 9, 8, 17, tzinfo=dt.UTC)
    assert (first["gpu_hours"], first["gpu_count"], first["usage_quantity"], first["usage_unit"]) == (
        8,
        8,
        8,
        "hour",
    )
    assert (first["list_cost"], first["billed_cost"], first["effective_cost"]) == (
        Decimal("88.48"),
        Decimal("66.36"),
        Decimal("66.36"),
    )
    assert (
        first["tags"] == '{"team":"llm-research","workload":"pretrain","gcp:project_label:env":"prod",'
        '"gcp:credit:PROMOTION":"-22.120000000"}'
    )
    assert (first["provider"], first["account"], first["billing_account"]) == (
        "gcp",
        "ml-prod-123456",
        "01A2B3-C4D5E6-F7A8B9",
    )
    assert (first["resource_name"], first["instance_type"], first["region"]) == (
        "a3-train-01",
        "a3-highgpu-8g",
        "us-central1",
    )
    assert (first["charge_category"], first["pricing_model"], first["service"]) == (
        "Usage",
        "on_demand",
        "Compute Engine",
    )
    core = lines.filter(pl.col("sku_description").str.starts_with("A3 Instance Core")).row(0, named=True)
    # other SKUs of a GPU VM bill no GPU-hours but carry the VM's GPU count
    assert (core["is_gpu_sku"], core["gpu_hours"], core["gpu_count"], core["usage_quantity"]) == (
        False,
        0,
        8,
        208,
    )
    t4 = lines.filter(pl.col("resource_id") == G2)
    assert t4["gpu_count"].unique().to_list() == [1] and t4["instance_type"].unique().to_list() == [
        "n1-standard-8"
    ]
    credited = lines.filter(pl.col("effective_cost") != pl.col("list_cost"))
    assert credited.height == 8 and credited["tags"].str.contains("PROMOTION").all()


def test_flat_csv_gives_the_same_lines_as_jsonl() -> None:
    (flat,) = read_all(FLAT)
    (nested,) = read_all(JSONL)
    assert (flat.read, len(flat.refused)) == (100, 0)
    assert_fixture_totals(flat.lines)
    assert flat.lines["line_no"].to_list() == list(range(2, 102))  # header is line 1
    keep = pl.exclude("source_file", "line_no", "line_key")
    # the flat file is a query's output without project.labels: its tags lack the project's label
    label = r'"gcp:project_label:[^"]*":"[^"]*"'
    without = pl.col("tags").str.replace_all(label + ",", "").str.replace_all("," + label, "")
    assert nested.lines["tags"].str.contains("gcp:project_label:env").all()
    assert flat.lines.select(keep).equals(nested.lines.with_columns(without).select(keep))


def test_dotted_csv_header_and_parquet_and_gzip(tmp_path: Path) -> None:
    text = FLAT.read_text()
    header, rest = text.split("\n", 1)
    dotted = header.replace("service_id", "service.id").replace(
        "usage_amount_in_pricing_units", "usage.amount_in_pricing_units"
    )
    (tmp_path / "dotted.csv").write_text(dotted + "\n" + rest)
    (tmp_path / "export.jsonl.gz").write_bytes(gzip.compress(JSONL.read_bytes()))
    pl.read_ndjson(JSONL).write_parquet(tmp_path / "export.parquet")  # the costs as IEEE doubles
    (tmp_path / "notes.txt").write_text("not an export")
    batches = {Path(b.source_file).name: b for b in read_all(tmp_path)}
    assert sorted(batches) == ["dotted.csv", "export.jsonl.gz", "export.parquet"]
    for batch in batches.values():
        assert (batch.read, len(batch.refused)) == (100, 0)
        assert_fixture_totals(batch.lines)
    assert batches["dotted.csv"].lines["sku"][0] == "E9C1-7A3F-52B0"
    assert batches["export.parquet"].lines["line_key"].n_unique() == 100


def test_window_selects_files_by_their_charge_periods(tmp_path: Path) -> None:
    shutil.copy(JSONL, tmp_path / "a.jsonl")
    assert read_all(tmp_path, OCT, OCT + dt.timedelta(days=30)) == []
    assert (
        len(
            read_all(
                tmp_path, dt.datetime(2025, 9, 9, 7, tzinfo=dt.UTC), dt.datetime(2025, 9, 9, 8, tzinfo=dt.UTC)
            )
        )
        == 1
    )
    assert (
        read_all(
            tmp_path, dt.datetime(2025, 9, 9, 8, tzinfo=dt.UTC), dt.datetime(2025, 9, 15, 6, tzinfo=dt.UTC)
        )
        == []
    )


def test_config_needs_a_path_and_refuses_unknown_keys() -> None:
    with pytest.raises(ValidationError, match="path"):
        GcpBillingConfig(name="b", type="gcp_billing")
    with pytest.raises(ValidationError, match="bigquery_table"):
        GcpBillingConfig(name="b", type="gcp_billing", path="/x", bigquery_table="p.d.t")
