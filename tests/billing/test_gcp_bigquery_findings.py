"""gcp_billing read from BigQuery (the in-process fake of tests/gcpfake) imports what the file path
imports and flags it alike: negative usage, an unknown cost_type (booked as Adjustment) and GPU-hours
beyond the resource's GPUs × hours are findings naming the export's own field, and nothing of it is
refused."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import polars as pl
import pytest
from gcpfake.bigquery import FakeBigQuery, FakeTable, schema_of, serve
from google.auth.credentials import AnonymousCredentials
from test_gcp_billing_bigquery import FLOATS, OCT, SEP, TABLE, TIMES, records

from connectors.billing import BillingBatch
from connectors.gcp_billing import GcpBillingConfig, GcpBillingConnector


@pytest.fixture
def endpoint() -> Iterator[str]:
    rows = records()[:12]  # the a3-highgpu-8g VM's hours 16:00-18:00 (H100 GPU SKU rows 1, 5, 9)
    rows[2]["usage"]["amount"] = "-" + rows[2]["usage"]["amount"]  # row 3 (A3 RAM): negative usage
    rows[3]["cost_type"] = "rebate"  # row 4: not a cost_type of the export
    rows[4]["usage"]["amount_in_pricing_units"] = "8.5"  # row 5: 8.5 GPU-hours in an hour on 8 GPUs
    fake = FakeBigQuery({TABLE: FakeTable(schema_of(rows, FLOATS, TIMES), rows)})
    with serve(fake) as url:
        yield url


def test_bigquery_rows_are_imported_with_findings(endpoint: str) -> None:
    config = GcpBillingConfig(
        name="bills", type="gcp_billing", bigquery_table=TABLE, api_endpoint=endpoint, backoff_s=0.01
    )
    source = GcpBillingConnector(config, credentials=AnonymousCredentials())
    try:
        (batch,) = source.read(SEP, OCT)
    finally:
        source.close()
    assert isinstance(batch, BillingBatch), batch
    assert (batch.read, batch.lines.height, batch.refused) == (12, 12, [])
    found = {(f.rule, f.column): (f.count, [line for line, _ in f.examples]) for f in batch.findings}
    assert found == {
        ("negative_usage", "usage.amount"): (1, [3]),
        ("unknown_value", "cost_type"): (1, [4]),
        ("gpu_hours_over_capacity", "usage.amount_in_pricing_units"): (1, [5]),
    }
    assert {f.provider for f in batch.findings} == {"gcp"}
    lines = batch.lines.sort("line_no")
    assert lines.row(3, named=True)["charge_category"] == "Adjustment"
    assert lines.row(3, named=True)["charge_type"] == "rebate"
    assert lines.filter(pl.col("line_no") == 5)["gpu_hours"].to_list() == [Decimal("8.5")]
