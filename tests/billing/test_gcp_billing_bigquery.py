"""gcp_billing straight from BigQuery: the real google-cloud-bigquery client over HTTP to the
in-process fake (tests/gcpfake/bigquery.py) serving the September 2025 fixture's 100 rows as the
export table. The lines must equal the JSONL file's (keys and positions aside) and reproduce the
fixtures/README.md totals."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from gcpfake.bigquery import FakeBigQuery, FakeTable, schema_of, serve
from google.auth.credentials import AnonymousCredentials
from pydantic import ValidationError

from connectors.base import ConfigurationError, FatalSourceError, RetriableError
from connectors.gcp_bigquery import bigquery_record
from connectors.gcp_billing import GcpBillingConfig, GcpBillingConnector

JSONL = Path(__file__).parent.parent / "fixtures" / "gcp" / "billing_export_resource_v1_2025-09.jsonl"
TABLE = "billing-admin-1.billing_export.gcp_billing_export_resource_v1_01A2B3_C4D5E6_F7A8B9"
SEP = dt.datetime(2025, 9, 1, tzinfo=dt.UTC)
OCT = dt.datetime(2025, 10, 1, tzinfo=dt.UTC)
FLOATS = {
    "cost",
    "cost_at_list",
    "currency_conversion_rate",
    "usage.amount",
    "usage.amount_in_pricing_units",
    "credits.amount",
    "price.effective_price",
    "price.tier_start_amount",
    "price.pricing_unit_quantity",
}
TIMES = {"usage_start_time", "usage_end_time", "export_time"}


def records() -> list[dict]:
    return [json.loads(line, parse_float=str, parse_int=str) for line in JSONL.read_text().splitlines()]


@pytest.fixture
def fake() -> FakeBigQuery:
    rows = records()
    return FakeBigQuery({TABLE: FakeTable(schema_of(rows, FLOATS, TIMES), rows)})


@pytest.fixture
def endpoint(fake: FakeBigQuery) -> Iterator[str]:
    with serve(fake) as url:
        yield url


def connector(endpoint: str, **keys: object) -> GcpBillingConnector:
    settings = {"bigquery_table": TABLE, "api_endpoint": endpoint, "backoff_s": 0.01, **keys}
    config = GcpBillingConfig(name="bills", type="gcp_billing", **settings)
    return GcpBillingConnector(config, credentials=AnonymousCredentials())


def read_all(endpoint: str, start: dt.datetime = SEP, end: dt.datetime = OCT, **keys: object) -> list:
    source = connector(endpoint, **keys)
    try:
        return list(source.read(start, end))
    finally:
        source.close()


def jsonl_lines() -> pl.DataFrame:
    config = GcpBillingConfig(name="bills", type="gcp_billing", path=str(JSONL))
    (batch,) = GcpBillingConnector(config).read(SEP, OCT)
    return batch.lines


def total(frame: pl.DataFrame, column: str) -> Decimal:
    return frame[column].sum()


def test_bigquery_read_gives_the_jsonl_lines_and_the_readme_totals(endpoint: str, fake: FakeBigQuery) -> None:
    batches = read_all(endpoint, page_size=30)
    # 100 rows in pages of 30: four getQueryResults pages, one batch each
    assert [(b.read, b.lines.height, len(b.refused), b.skipped) for b in batches] == [
        (30, 30, 0, 0),
        (30, 30, 0, 0),
        (30, 30, 0, 0),
        (10, 10, 0, 0),
    ]
    pages = [p for route, _, p in fake.requests if route == "getQueryResults"]
    assert [p.get("pageToken") for p in pages] == [None, ["30"], ["60"], ["90"]]
    assert all(p["maxResults"] == ["30"] for p in pages)
    lines = pl.concat([b.lines for b in batches])
    assert lines.height == 100
    assert total(lines, "gpu_hours") == Decimal("140")
    assert abs(total(lines, "list_cost") - Decimal("1626.563467945205")) <= Decimal("1e-6")
    assert total(lines, "effective_cost") - total(lines, "list_cost") == Decimal("-176.96")
    assert abs(total(lines, "effective_cost") - Decimal("1449.603467945205")) <= Decimal("1e-6")
    assert total(lines, "billed_cost") == total(lines, "effective_cost")
    # every normalized column equals the JSONL path's, row for row
    keep = pl.exclude("source_file", "line_no", "line_key")
    assert lines.select(keep).equals(jsonl_lines().select(keep))
    window = "2025-09-01T00:00:00Z/2025-10-01T00:00:00Z"
    assert lines["source_file"].unique().to_list() == [f"bigquery://{TABLE}?window={window}"]
    assert lines["line_no"].to_list() == list(range(1, 101))
    assert (
        lines["line_key"].n_unique() == 100 and lines["line_key"].str.contains(r"^sha1:[0-9a-f]{40}$").all()
    )
    assert {(b.period_start, b.period_end) for b in batches} == {(SEP, OCT)}
    # the same rows give the same keys on the next read
    again = pl.concat([b.lines for b in read_all(endpoint, page_size=100)])
    assert again["line_key"].to_list() == lines["line_key"].to_list()


def test_the_query_is_parameterized_and_selects_money_as_numeric_text(
    endpoint: str, fake: FakeBigQuery
) -> None:
    read_all(endpoint, dt.datetime(2025, 9, 9, tzinfo=dt.UTC), dt.datetime(2025, 9, 10, tzinfo=dt.UTC))
    (body,) = fake.queries
    query = body["configuration"]["query"]
    sql = query["query"]
    assert query["useLegacySql"] is False
    assert f"FROM `{TABLE}`" in sql and "2025" not in sql  # the window is never formatted into the SQL
    assert "CAST(CAST(cost AS NUMERIC) AS STRING) AS cost" in sql
    assert "CAST(CAST(c.amount AS NUMERIC) AS STRING) AS amount" in sql
    assert sql.endswith(
        "WHERE usage_start_time >= @start AND usage_start_time < @end"
        " AND _PARTITIONTIME >= TIMESTAMP_SUB(@start, INTERVAL 1 DAY)"
    )
    params = {
        p["name"]: (p["parameterType"]["type"], p["parameterValue"]["value"])
        for p in query["queryParameters"]
    }
    assert params == {
        "start": ("TIMESTAMP", "2025-09-09 00:00:00+00:00"),
        "end": ("TIMESTAMP", "2025-09-10 00:00:00+00:00"),
    }
    assert re.search(r"\bproject\.id\b", sql) and "ancestors" not in sql  # only the columns it reads


def test_a_window_of_one_day_reads_that_day_only(endpoint: str) -> None:
    day = dt.datetime(2025, 9, 8, tzinfo=dt.UTC)
    (batch,) = read_all(endpoint, day, day + dt.timedelta(days=1))
    expected = jsonl_lines().filter(
        (pl.col("charge_start") >= day) & (pl.col("charge_start") < day + dt.timedelta(days=1))
    )
    assert batch.lines.height == expected.height == 32  # 8 hours × 4 SKUs of the H100 VM
    assert batch.lines["charge_start"].min() == dt.datetime(2025, 9, 8, 16, tzinfo=dt.UTC)
    keep = pl.exclude("source_file", "line_no", "line_key")
    assert batch.lines.select(keep).equals(expected.select(keep))
    assert total(batch.lines, "gpu_hours") == Decimal("64")  # 8 hours × 8 H100
    assert total(batch.lines, "effective_cost") == Decimal("631.941745976")
    assert (batch.period_start, batch.period_end) == (day, day + dt.timedelta(days=1))
    assert read_all(endpoint, OCT, OCT + dt.timedelta(days=30)) == []


def test_permission_denied_names_the_roles(endpoint: str, fake: FakeBigQuery) -> None:
    message = "Access Denied: Project billing-admin-1: User does not have bigquery.jobs.create permission"
    fake.fail_always = ("jobs.insert", 403, "accessDenied", message)
    with pytest.raises(FatalSourceError) as caught:
        read_all(endpoint)
    text = str(caught.value)
    assert "roles/bigquery.dataViewer on the dataset billing-admin-1.billing_export" in text
    assert "roles/bigquery.jobUser on the project billing-admin-1" in text
    assert "bigquery.jobs.create" in text


def test_the_query_project_is_the_one_named(endpoint: str, fake: FakeBigQuery) -> None:
    fake.fail_always = ("jobs.insert", 403, "accessDenied", "Access Denied")
    with pytest.raises(FatalSourceError, match="roles/bigquery.jobUser on the project analytics-runner"):
        read_all(endpoint, bigquery_project="analytics-runner")
    assert [path for route, path, _ in fake.requests if route == "jobs.insert"] == [
        "/projects/analytics-runner/jobs"
    ]


def test_unauthenticated_is_an_auth_error(endpoint: str, fake: FakeBigQuery) -> None:
    fake.fail_always = ("*", 401, "unauthorized", "Request is missing required authentication credential")
    with pytest.raises(FatalSourceError, match="authentication failed.*credentials_file"):
        read_all(endpoint)


def test_a_missing_table_is_a_configuration_error(endpoint: str) -> None:
    with pytest.raises(ConfigurationError, match="billing-admin-1.billing_export.gcp_billing_export_v1_XX"):
        read_all(endpoint, bigquery_table="billing-admin-1.billing_export.gcp_billing_export_v1_XX")


def test_throttling_and_5xx_are_retried_then_retriable(endpoint: str, fake: FakeBigQuery) -> None:
    fake.fail_next = [
        ("jobs.insert", 503, "backendError", "Service unavailable"),
        ("getQueryResults", 429, "rateLimitExceeded", "Too many requests"),
    ]
    batches = read_all(endpoint, page_size=50)
    assert sum(b.lines.height for b in batches) == 100
    assert [r for r, _, _ in fake.requests].count("jobs.insert") == 2
    fake.fail_always = ("getQueryResults", 503, "backendError", "Service unavailable")
    with pytest.raises(RetriableError, match="Service unavailable"):
        read_all(endpoint, max_retries=2, timeout_s=0.3)


def test_config_bigquery_keys() -> None:
    with pytest.raises(ValidationError, match="exclusive"):
        GcpBillingConfig(name="b", type="gcp_billing", path="/x", bigquery_table=TABLE)
    with pytest.raises(ValidationError, match="project.dataset.table"):
        GcpBillingConfig(name="b", type="gcp_billing", bigquery_table="p.d.t`; DROP TABLE x; --")
    with pytest.raises(ValidationError, match="bigquery_project"):
        GcpBillingConfig(name="b", type="gcp_billing", bigquery_table=TABLE, bigquery_project="bad project")
    with pytest.raises(ValidationError, match="credentials_file"):
        GcpBillingConfig(name="b", type="gcp_billing", path="/x", credentials_file="/k.json")
    config = GcpBillingConfig(name="b", type="gcp_billing", bigquery_table="example.com:proj-1.ds.t_1")
    assert config.page_size == 5000


def test_project_labels_are_read_but_left_out_of_a_rows_key() -> None:
    """``project.labels`` is selected beside the record (``project_labels``) since project labels
    became facts; a row's key is what it was before, so a re-import replaces the lines of then."""
    row = {
        "sku": {"id": "E9C1", "description": "Nvidia H100 80GB GPU"},
        "cost": "88.48",
        "project": {"id": "p"},
    }
    labelled = {**row, "project_labels": [{"key": "env", "value": "prod"}]}
    assert bigquery_record(labelled, 1)["_key"] == bigquery_record(row, 1)["_key"]
    assert bigquery_record({**row, "cost": "88.49"}, 1)["_key"] != bigquery_record(row, 1)["_key"]
