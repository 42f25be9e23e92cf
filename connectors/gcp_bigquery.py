"""BigQuery for ``gcp_billing``: the query over a billing export table, its rows as export
records, and the client's errors as the connector's (with the operator's next step).

Money is selected as ``CAST(CAST(x AS NUMERIC) AS STRING)`` so it never passes through a float on
our side; the table name is checked against BigQuery's naming rules before it is backquoted into
the SQL (a name cannot be a query parameter).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from connectors.billing_io import LINE
from connectors.cloud import auth_error, permission_error
from connectors.sdk import ConfigurationError, FatalSourceError, RetriableError

# BigQuery names: a project id (optionally domain-scoped, ``example.com:proj``), a dataset id, a
# table id. Checked before the name is backquoted into the SQL (a name cannot be a parameter).
PROJECT = re.compile(r"(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]")
TABLE = re.compile(rf"({PROJECT.pattern})\.([A-Za-z0-9_]{{1,1024}})\.([A-Za-z0-9_-]{{1,1024}})")
BIGQUERY_SCOPE = "https://www.googleapis.com/auth/bigquery"
_NUMBER_TYPES = {"FLOAT", "FLOAT64", "NUMERIC", "BIGNUMERIC", "BIGDECIMAL", "INTEGER", "INT64"}
# the export's columns the normalization reads: top-level column → its sub-fields (None: a leaf
# or a repeated {key, value} record selected whole); ``credits`` is built separately
BQ_COLUMNS: dict[str, tuple[str, ...] | None] = {
    "billing_account_id": None,
    "service": ("id", "description"),
    "sku": ("id", "description"),
    "usage_start_time": None,
    "usage_end_time": None,
    "project": ("id",),
    "labels": None,
    "system_labels": None,
    "location": ("region", "zone"),
    "resource": ("name", "global_name"),
    "cost": None,
    "cost_at_list": None,
    "currency": None,
    "usage": ("amount", "unit", "amount_in_pricing_units", "pricing_unit"),
    "invoice": ("month",),
    "cost_type": None,
    "export_time": None,
}
_BQ_REQUIRED = ("sku", "usage_start_time", "usage_end_time", "cost", "currency")
BQ_TIMES = ("usage_start_time", "usage_end_time", "export_time")
#: Columns read after row keys were defined, left out of the key (re-imports keep their keys)
UNKEYED = ("project_labels",)


def bigquery_module() -> Any:
    try:
        from google.cloud import bigquery
    except ImportError:
        raise ConfigurationError(
            'gcp_billing: "bigquery_table" needs google-cloud-bigquery: pip install "gpu-ledger[gcp]"'
        ) from None
    return bigquery


def table_parts(table_id: str) -> tuple[str, str, str]:
    match = TABLE.fullmatch(table_id)
    if match is None:
        raise ConfigurationError(
            f'gcp_billing: "bigquery_table" must be "project.dataset.table": {table_id!r}'
        )
    return match.group(1), match.group(2), match.group(3)


def iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _number(expr: str) -> str:
    # NUMERIC: the double rounded to 9 decimals; its STRING: plain decimal text (no exponent)
    return f"CAST(CAST({expr} AS NUMERIC) AS STRING)"


def build_query(table_id: str, schema: Sequence[Any], partitioning: Any = None) -> str:
    """The SELECT over ``table_id`` for the columns of ``schema`` (``SchemaField`` list) the
    normalization reads; ``@start``/``@end`` are its parameters. Raises ConfigurationError when
    the table lacks a column every billing export has."""
    fields = {f.name: f for f in schema}
    missing = [c for c in _BQ_REQUIRED if c not in fields]
    if "sku" in fields and "description" not in {f.name for f in fields["sku"].fields}:
        missing.append("sku.description")
    if missing:
        raise ConfigurationError(
            f"gcp_billing: {table_id} is not a Cloud Billing export table: no column {missing[0]!r}"
        )

    def leaf(field: Any, expr: str) -> str:
        return _number(expr) if field.field_type.upper() in _NUMBER_TYPES else expr

    items: list[str] = []
    for column, subfields in BQ_COLUMNS.items():
        field = fields.get(column)
        if field is None:
            continue
        if subfields is None:
            items.append(f"{leaf(field, column)} AS {column}")
            continue
        inner = {f.name: f for f in field.fields}
        parts = [f"{leaf(inner[n], f'{column}.{n}')} AS {n}" for n in subfields if n in inner]
        if parts:
            items.append(f"STRUCT({', '.join(parts)}) AS {column}")
    if "credits" in fields:
        inner = {f.name: f for f in fields["credits"].fields}
        parts = [f"{leaf(inner[n], f'c.{n}')} AS {n}" for n in ("name", "amount", "type") if n in inner]
        items.append(
            f"ARRAY(SELECT AS STRUCT {', '.join(parts)} FROM UNNEST(credits) AS c WITH OFFSET AS o"
            " ORDER BY o) AS credits"
        )
    if "project" in fields and "labels" in {f.name for f in fields["project"].fields}:
        # beside the record, not in it: a row's key (bigquery_record) stays what it was before
        # project labels were read, so re-imports replace the lines imported then
        items.append("project.labels AS project_labels")
    where = ["usage_start_time >= @start", "usage_start_time < @end"]
    if partitioning is not None:
        column = getattr(partitioning, "field", None) or "_PARTITIONTIME"
        if column in ("_PARTITIONTIME", "export_time"):
            where.append(f"{column} >= TIMESTAMP_SUB(@start, INTERVAL 1 DAY)")
    project, dataset, table = table_parts(table_id)
    return "SELECT " + ", ".join(items) + f" FROM `{project}.{dataset}.{table}` WHERE " + " AND ".join(where)


def _text_times(value: Any) -> Any:
    return value.astimezone(dt.UTC).isoformat(sep=" ") if isinstance(value, dt.datetime) else value


def bigquery_record(row: Any, line: int) -> dict[str, Any]:
    """A result row as the nested record a JSONL export holds (text leaves), ``_line`` and its key."""
    record = {name: _text_times(value) if name in BQ_TIMES else value for name, value in row.items()}
    keyed = {name: value for name, value in record.items() if name not in UNKEYED}
    canonical = json.dumps(keyed, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    record["_key"] = "sha1:" + hashlib.sha1(canonical.encode()).hexdigest()
    record[LINE] = line
    return record


def retriable(exc: Exception) -> bool:
    from google.api_core import exceptions as gexc
    from google.cloud.bigquery.retry import DEFAULT_RETRY

    if isinstance(exc, gexc.TooManyRequests | gexc.ServerError):
        return True
    return bool(DEFAULT_RETRY._predicate(exc))  # rateLimitExceeded/backendError reasons, connection errors


CONNECTOR_ERRORS = (ConfigurationError, FatalSourceError, RetriableError)


def _reasons(exc: Any) -> set[str]:
    return {e.get("reason", "") for e in (getattr(exc, "errors", None) or []) if isinstance(e, dict)}


def bigquery_error(exc: Exception, table_id: str, query_project: str) -> Exception:
    """A client or transport exception as the connector's error, with the operator's next step."""
    import concurrent.futures

    import requests
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    source = f"gcp_billing (BigQuery {table_id})"
    project, dataset, _ = table_parts(table_id)
    detail = getattr(exc, "message", None) or str(exc)
    detail = detail.split("\n")[0][:300]
    if isinstance(exc, gexc.RetryError):
        cause = exc.cause
        return RetriableError(f"{source}: gave up after retries: {cause or exc}")
    if isinstance(exc, gexc.Forbidden) and _reasons(exc) & {"rateLimitExceeded", "quotaExceeded"}:
        return RetriableError(f"{source}: quota or rate limit ({detail})")
    if isinstance(exc, gexc.Forbidden | gexc.PermissionDenied):
        return permission_error(
            source,
            detail,
            f"roles/bigquery.dataViewer on the dataset {project}.{dataset} (to read the table) and"
            f" roles/bigquery.jobUser on the project {query_project} (to run the query)",
        )
    if isinstance(exc, gexc.Unauthorized | gexc.Unauthenticated | auth_exc.GoogleAuthError):
        return auth_error(
            source,
            detail,
            "set credentials_file to a service-account key file, or provide Application Default"
            " Credentials (GOOGLE_APPLICATION_CREDENTIALS, or `gcloud auth application-default login`)",
        )
    if isinstance(exc, gexc.NotFound):
        return ConfigurationError(
            f"{source}: not found ({detail}). Check bigquery_table {table_id!r}: the billing export's"
            " project, dataset and table name (gcp_billing_export_resource_v1_<BILLING_ACCOUNT_ID>)"
        )
    if isinstance(exc, gexc.BadRequest):
        return ConfigurationError(f"{source}: the table cannot answer the billing query ({detail})")
    if isinstance(exc, gexc.TooManyRequests | gexc.ServerError):
        return RetriableError(f"{source}: {detail}")
    if isinstance(exc, requests.exceptions.RequestException | concurrent.futures.TimeoutError | OSError):
        return RetriableError(f"{source}: {type(exc).__name__}: {detail}")
    if isinstance(exc, gexc.GoogleAPICallError):
        return FatalSourceError(f"{source}: {detail}")
    return exc
