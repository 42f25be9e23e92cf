"""``aws_cur`` reading report deliveries from S3 through boto3, against moto's server on 127.0.0.1.

Legacy CUR: the period manifest names the current assembly; an older assembly's files in the same
period are not read. CUR 2.0 Data Exports: ``metadata/BILLING_PERIOD=…`` manifests name the data
files of the current execution. Only periods overlapping the window are read.
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from awsfake.server import KEY_ID, SECRET

from connectors.aws_cur import AwsCurConfig, AwsCurConnector
from connectors.base import ConfigurationError
from connectors.billing import BillingBatch

FIXTURES = Path(__file__).parents[1] / "fixtures" / "aws"
CUR2, LEGACY = FIXTURES / "cur2_2025-09_daily.csv", FIXTURES / "cur_legacy_2025-09_daily.csv"
SEP, OCT = dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC)
BUCKET = "acme-cur"


def split(path: Path, at: int) -> tuple[bytes, bytes]:
    """The CSV as two files: records before ``at`` and the rest, each with the header."""
    header, *records = path.read_bytes().splitlines(keepends=True)
    return b"".join([header, *records[:at]]), b"".join([header, *records[at:]])


def connector(endpoint: str, uri: str) -> AwsCurConnector:
    return AwsCurConnector(
        AwsCurConfig(
            name="bills",
            s3_uri=uri,
            endpoint_url=endpoint,
            aws_access_key_id=KEY_ID,  # type: ignore[arg-type]
            aws_secret_access_key=SECRET,  # type: ignore[arg-type]
            max_retries=0,
        )
    )


def read(endpoint: str, uri: str, start: dt.datetime = SEP, end: dt.datetime = OCT) -> list[BillingBatch]:
    with connector(endpoint, uri) as source:
        batches = list(source.read(start, end))
    assert all(isinstance(b, BillingBatch) for b in batches), batches
    return batches  # type: ignore[return-value]


def totals(batches: list[BillingBatch]) -> tuple[int, Decimal, Decimal, Decimal]:
    lines = pl.concat([b.lines for b in batches])
    gpu = lines.filter(pl.col("instance_type").is_not_null())
    return lines.height, lines["billed_cost"].sum(), gpu["effective_cost"].sum(), lines["gpu_hours"].sum()


@pytest.mark.slow
def test_legacy_cur_reads_only_the_assembly_the_manifest_names(
    moto: str,  # noqa: F811
    aws_client: Callable[..., Any],  # noqa: F811
) -> None:
    s3 = aws_client("s3")
    s3.create_bucket(Bucket=BUCKET)
    folder = "cur/gpu-report/20250901-20251001"
    old, new = f"{folder}/0f1e-old-assembly", f"{folder}/7c2d-new-assembly"
    part1, part2 = split(LEGACY, 70)
    put = lambda key, body: s3.put_object(Bucket=BUCKET, Key=key, Body=body)  # noqa: E731
    put(f"{old}/gpu-report-1.csv.gz", gzip.compress(LEGACY.read_bytes()))  # superseded: would double
    put(f"{new}/gpu-report-1.csv.gz", gzip.compress(part1))
    put(f"{new}/gpu-report-2.csv.gz", gzip.compress(part2))
    manifest = {
        "assemblyId": "7c2d-new-assembly",
        "account": "999988887777",
        "bucket": BUCKET,
        "reportName": "gpu-report",
        "compression": "GZIP",
        "contentType": "text/csv",
        "billingPeriod": {"start": "20250901T000000.000Z", "end": "20251001T000000.000Z"},
        "reportKeys": [f"{new}/gpu-report-1.csv.gz", f"{new}/gpu-report-2.csv.gz"],
    }
    put(f"{folder}/gpu-report-Manifest.json", json.dumps(manifest).encode())
    put(f"{new}/gpu-report-Manifest.json", json.dumps(manifest).encode())  # the assembly's own copy
    # August: another period, with its own manifest; not in the window.
    aug = "cur/gpu-report/20250801-20250901"
    put(f"{aug}/aaaa/gpu-report-1.csv.gz", gzip.compress(LEGACY.read_bytes()))
    put(
        f"{aug}/gpu-report-Manifest.json",
        json.dumps({"assemblyId": "aaaa", "reportKeys": [f"{aug}/aaaa/gpu-report-1.csv.gz"]}).encode(),
    )

    batches = read(moto, f"s3://{BUCKET}/cur")
    assert [b.source_file for b in batches] == [
        f"s3://{BUCKET}/{new}/gpu-report-1.csv.gz",
        f"s3://{BUCKET}/{new}/gpu-report-2.csv.gz",
    ]
    assert [(b.read, b.lines.height) for b in batches] == [(70, 70), (67, 67)]
    assert {(b.period_start, b.period_end, b.assembly_id) for b in batches} == {
        (SEP, OCT, "7c2d-new-assembly")
    }
    assert totals(batches) == (137, Decimal("32593.3144"), Decimal("32449.3144"), Decimal("7520"))
    assert batches[1].lines["line_no"][0] == 2  # line numbers are per file

    august = read(moto, f"s3://{BUCKET}/cur", dt.datetime(2025, 8, 1, tzinfo=dt.UTC), SEP)
    assert [(b.source_file, b.assembly_id, b.period_start) for b in august] == [
        (f"s3://{BUCKET}/{aug}/aaaa/gpu-report-1.csv.gz", "aaaa", dt.datetime(2025, 8, 1, tzinfo=dt.UTC))
    ]


def test_cur2_data_exports_by_billing_period(
    moto: str,  # noqa: F811
    aws_client: Callable[..., Any],  # noqa: F811
) -> None:
    s3 = aws_client("s3")
    s3.create_bucket(Bucket=BUCKET)
    base = "exports/gpu-export"
    data = f"{base}/data/BILLING_PERIOD=2025-09"
    put = lambda key, body: s3.put_object(Bucket=BUCKET, Key=key, Body=body)  # noqa: E731
    # Execution 1 (superseded) and execution 2 ("create new" delivery: one folder per execution).
    put(f"{data}/exec-0001/gpu-export-00001.csv.gz", gzip.compress(CUR2.read_bytes()))
    buffer = io.BytesIO()
    text = pl.read_csv(CUR2, infer_schema=False)
    text.slice(0, 100).write_parquet(buffer)
    put(f"{data}/exec-0002/gpu-export-00001.snappy.parquet", buffer.getvalue())
    part2 = split(CUR2, 100)[1]
    put(f"{data}/exec-0002/gpu-export-00002.csv.gz", gzip.compress(part2))
    manifest = {
        "executionId": "exec-0002",
        "exportArn": "arn:aws:bcm-data-exports:us-east-1:999988887777:export/gpu-export-1234",
        "columns": [{"name": c, "type": "string"} for c in text.columns],
        "dataFiles": [
            f"s3://{BUCKET}/{data}/exec-0002/gpu-export-00001.snappy.parquet",
            f"s3://{BUCKET}/{data}/exec-0002/gpu-export-00002.csv.gz",
        ],
    }
    put(f"{base}/metadata/BILLING_PERIOD=2025-09/gpu-export-Manifest.json", json.dumps(manifest).encode())
    # October is outside the window, with or without its manifest.
    put(
        f"{base}/data/BILLING_PERIOD=2025-10/exec-0003/gpu-export-00001.csv.gz",
        gzip.compress(CUR2.read_bytes()),
    )

    batches = read(moto, f"s3://{BUCKET}/exports/")
    assert [(b.source_file.rsplit("/", 2)[-2:], b.read) for b in batches] == [
        (["exec-0002", "gpu-export-00001.snappy.parquet"], 100),
        (["exec-0002", "gpu-export-00002.csv.gz"], 37),
    ]
    assert {(b.period_start, b.period_end, b.assembly_id) for b in batches} == {(SEP, OCT, "exec-0002")}
    assert totals(batches) == (137, Decimal("32593.3144"), Decimal("32449.3144"), Decimal("7520"))


def test_s3_errors_name_the_next_step(moto: str) -> None:  # noqa: F811
    with (
        connector(moto, "s3://no-such-bucket/cur") as source,
        pytest.raises(ConfigurationError, match="NoSuchBucket.*s3_uri"),
    ):
        list(source.read(SEP, OCT))


def test_config_wants_exactly_one_source() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        AwsCurConfig(name="bills")
    with pytest.raises(ValueError, match="exactly one"):
        AwsCurConfig(name="bills", path="/x", s3_uri="s3://bucket/p")
    with pytest.raises(ValueError, match="go together"):
        AwsCurConfig(name="bills", s3_uri="s3://bucket/p", aws_access_key_id="A")  # type: ignore[arg-type]
    assert AwsCurConfig(name="bills", s3_uri="s3://bucket/p").type == "aws_cur"
