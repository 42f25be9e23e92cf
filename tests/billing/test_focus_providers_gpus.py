"""Providers beyond the three clouds through FOCUS: kept as their own provider, their GPU rows
recognised where the instance catalog has no entry (SkuPriceDetails, a GPU-hour unit, the SKU or
charge description, OCI shape names, ``x_`` columns), the catalog extended in config. Rows are the
FinOps Foundation sample's real Oracle record (line 927) with the fields under test changed."""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from connectors.billing import BillingBatch, conform
from connectors.focus import FocusConfig, FocusConnector
from service.billing.catalog import (
    InstanceTypeConfig,
    bundled_catalog,
    fill_gpus,
    load_catalog,
    unknown_gpu_types,
)

SAMPLE = Path(__file__).parent.parent / "fixtures" / "public" / "focus" / "focus_sample.csv.gz"
WIDE = (dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(2025, 1, 1, tzinfo=dt.UTC))
D = Decimal


def sample(lines: list[int]) -> tuple[list[str], list[dict[str, str]]]:
    with gzip.open(SAMPLE, "rb") as raw:
        reader = csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", newline=""))
        rows = [dict(r) for n, r in enumerate(reader, start=2) if n in lines]
        return list(reader.fieldnames or []), rows


ORACLE_LINE = 927  # Oracle, Usage, "Standard - E3 - Memory", 8 GB Hours, BilledCost 0.012


def oracle_rows(
    *changes: dict[str, str], extra: tuple[str, ...] = ()
) -> tuple[list[str], list[dict[str, str]]]:
    header, (template,) = sample([ORACLE_LINE])
    rows = []
    for n, change in enumerate(changes):
        row = {**template, **dict.fromkeys(extra, ""), "ResourceId": f"ocid1.instance.oc1..r{n}"}
        row.update(change)
        rows.append(row)
    return [*header, *extra], rows


def read(tmp_path: Path, header: list[str], rows: list[dict[str, str]]) -> BillingBatch:
    path = tmp_path / "focus.csv"
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, header, quoting=csv.QUOTE_ALL)
        writer.writeheader()
        writer.writerows(rows)
    (batch,) = FocusConnector(FocusConfig(name="f", type="focus", path=str(path))).read(*WIDE)
    assert isinstance(batch, BillingBatch) and batch.refused == []
    return batch


GPU_COLUMNS = (
    "line_no",
    "provider",
    "instance_type",
    "gpu_count",
    "is_gpu_sku",
    "usage_quantity",
    "gpu_hours",
)


def test_provider_names_beyond_the_clouds(tmp_path: Path) -> None:
    header, rows = oracle_rows(
        {"ProviderName": "Oracle Cloud Infrastructure"},
        {"ProviderName": "Alibaba Cloud"},
        {"ProviderName": "Lambda Labs, Inc."},
        {"ProviderName": "", "PublisherName": "Oracle"},
        {"ProviderName": "", "PublisherName": "", "InvoiceIssuerName": "Amazon Web Services, Inc."},
        {"ProviderName": "NULL", "PublisherName": "NULL", "InvoiceIssuerName": ""},
        {"ProviderName": "IBM Cloud"},
    )
    batch = read(tmp_path, header, rows)
    assert batch.lines["provider"].to_list() == [
        "oracle",
        "alibaba",
        "lambda-labs-inc",
        "oracle",
        "aws",
        "unknown",
        "ibm",
    ]
    found = {
        (f.rule, f.column, f.provider): (f.count, [line for line, _ in f.examples]) for f in batch.findings
    }
    reason = "empty: the provider is taken from PublisherName or InvoiceIssuerName, else 'unknown'"
    assert {f.reason for f in batch.findings} == {reason}
    assert found == {
        ("missing_value", "ProviderName", "oracle"): (1, [5]),
        ("missing_value", "ProviderName", "aws"): (1, [6]),
        ("missing_value", "ProviderName", "unknown"): (1, [7]),
    }
    assert batch.lines["billed_cost"].sum() == D("0.084")  # 7 × 0.012: every row's money is in


def test_gpu_rows_of_other_providers_are_recognised(tmp_path: Path) -> None:
    header, rows = oracle_rows(
        # 2: OCI's GPU SKU, billed per GPU-hour: its quantity already is GPU-hours
        {"ChargeDescription": "Compute - GPU - H100", "ConsumedUnit": "GPU Hours", "ConsumedQuantity": "8"},
        # 3: a shape in the description: the instance type; its GPUs come from the catalog
        {"ChargeDescription": "BM.GPU.H100.8", "ConsumedUnit": "Hours", "ConsumedQuantity": "1"},
        # 4: a GPU named, no count, hours: the GPU itself (GPU-hours)
        {"ChargeDescription": "Compute - GPU - A100", "ConsumedUnit": "Hours", "ConsumedQuantity": "3"},
        # 5: a count the text states: 2 node-hours of 8 GPUs
        {"ChargeDescription": "8x H100 node", "ConsumedUnit": "Hours", "ConsumedQuantity": "2"},
        # 6: SkuPriceDetails names the count (as a quoted number, another spelling of GpuCount)
        {"ProviderName": "Alibaba Cloud", "SkuPriceDetails": '{"GPUCount": "4"}', "ConsumedUnit": "Hours",
         "ConsumedQuantity": "1"},
        # 7: not a GPU row
        {},
        # 8: an x_ column names the shape
        {"x_Shape": "VM.GPU.A10.2", "ConsumedUnit": "Hours", "ConsumedQuantity": "5"},
        # 9: a cloud's description naming a GPU is not searched (its instance type is the catalog's)
        {"ProviderName": "AWS", "ChargeDescription": "GPU instance hour", "ConsumedUnit": "Hours"},
        # 10: the word GPU inside another word is no GPU
        {"ChargeDescription": "GPUDirect storage", "ConsumedUnit": "GB Hours"},
        extra=("x_Shape", "SkuPriceDetails"),
    )  # fmt: skip
    batch = read(tmp_path, header, rows)
    assert batch.lines.select(GPU_COLUMNS).rows() == [
        (2, "oracle", None, None, True, D(8), D(8)),
        (3, "oracle", "BM.GPU.H100.8", None, None, D(1), None),
        (4, "oracle", None, None, True, D(3), D(3)),
        (5, "oracle", None, 8, None, D(2), D(16)),
        (6, "alibaba", None, 4, None, D(1), D(4)),
        (7, "oracle", None, None, None, D(8), None),
        (8, "oracle", "VM.GPU.A10.2", None, None, D(5), None),
        (9, "aws", None, None, None, D(8), None),
        (10, "oracle", None, None, None, D(8), None),
    ]
    # the ingestor completes the shapes from the catalog (BM.GPU.H100.8: 8, VM.GPU.A10.2: 2)
    filled = fill_gpus(conform(batch.lines), bundled_catalog())
    assert filled.select("line_no", "gpu_count", "gpu_hours").rows() == [
        (2, None, D(8)),
        (3, 8, D(8)),
        (4, None, D(3)),
        (5, 8, D(16)),
        (6, 4, D(4)),
        (7, None, None),
        (8, 2, D(10)),
        (9, None, None),
        (10, None, None),
    ]


def test_an_unknown_oci_shape_counts_by_its_name_and_config_wins(tmp_path: Path) -> None:
    header, rows = oracle_rows(
        {"ChargeDescription": "BM.GPU.Z9-v2.4", "ConsumedUnit": "Hours", "ConsumedQuantity": "2"},
        {"ChargeDescription": "BM.GPU.Z9", "ConsumedUnit": "Hours", "ConsumedQuantity": "2"},  # no count
    )
    lines = conform(read(tmp_path, header, rows).lines)
    bundled = fill_gpus(lines, bundled_catalog())
    assert bundled.select("instance_type", "gpu_count", "gpu_hours").rows() == [
        ("BM.GPU.Z9-v2.4", 4, D(8)),
        ("BM.GPU.Z9", None, None),
    ]
    assert unknown_gpu_types(bundled, bundled_catalog()) == ["BM.GPU.Z9"]  # reported: add it in config
    configured = load_catalog(
        [
            InstanceTypeConfig(
                instance_type="bm.gpu.z9-v2.4", gpu_model="Z9", gpu_count=2, provider="oracle"
            ),
            InstanceTypeConfig(instance_type="BM.GPU.Z9", gpu_model="Z9", gpu_count=8, provider="oracle"),
        ]
    )
    assert fill_gpus(lines, configured).select("gpu_count", "gpu_hours").rows() == [(2, D(4)), (8, D(16))]


@pytest.mark.parametrize(
    ("shape", "gpus"),
    [
        ("BM.GPU.A100-v2.8", 8),
        ("BM.GPU4.8", 8),
        ("BM.GPU3.8", 8),
        ("BM.GPU2.2", 2),
        ("VM.GPU3.4", 4),
        ("VM.GPU.A10.1", 1),
        ("BM.GPU.H200.8", 8),
        ("BM.GPU.L40S.4", 4),
        ("BM.GPU.MI300X.8", 8),
    ],
)
def test_bundled_oci_shapes(shape: str, gpus: int) -> None:
    entry = bundled_catalog().get(shape)
    assert entry is not None and (entry.provider, entry.gpu_count) == ("oracle", gpus)


def test_a_standard_oci_shape_is_no_gpu_instance() -> None:
    lines = conform(pl.DataFrame({"instance_type": ["VM.Standard2.8", "BM.Standard.E5.192"]}))
    filled = fill_gpus(lines, bundled_catalog())  # the last number of a standard shape counts OCPUs
    assert filled["gpu_count"].to_list() == [None, None]


def test_a_cloud_export_without_resource_ids_is_imported_and_flagged(tmp_path: Path) -> None:
    header, rows = sample([2, 3, ORACLE_LINE])
    header = [c for c in header if c != "ResourceId"]
    for row in rows:
        del row["ResourceId"]
    batch = read(tmp_path, header, rows)
    assert batch.lines.height == 3 and batch.lines["resource_id"].to_list() == [None, None, None]
    (finding,) = batch.findings  # the Oracle row is no finding: a provider may bill no resources
    assert (finding.rule, finding.column, finding.provider, finding.count) == (
        "missing_column",
        "ResourceId",
        "aws",
        2,
    )


def test_gpu_hours_beyond_the_stated_gpus_are_flagged_on_consumed_quantity(tmp_path: Path) -> None:
    header, rows = oracle_rows(
        {"ChargeDescription": "8x H100 node", "ConsumedUnit": "Hours", "ConsumedQuantity": "1"},
        {"ChargeDescription": "8x H100 node", "ConsumedUnit": "Hours", "ConsumedQuantity": "3"},  # in 1 hour
    )
    batch = read(tmp_path, header, rows)
    assert batch.lines["gpu_hours"].to_list() == [D(8), D(24)]  # imported as billed
    (finding,) = batch.findings
    assert (finding.rule, finding.column, finding.provider, finding.count) == (
        "gpu_hours_over_capacity",
        "ConsumedQuantity",
        "oracle",
        1,
    )
    assert [line for line, _ in finding.examples] == [3]
