"""gcp_billing on the flat export as real tools write it (issue 11): every JSON-bearing column is
decoded under either name — ``credits`` / ``credits_json``, ``labels`` / ``labels_json``,
``system_labels`` / ``system_labels_json``, a whole record in one cell — written as JSON or as the
Python literal pandas and koku-nise write; a flat CSV and a JSONL of the same rows give the same
lines, money and GPU facts; timestamps in every form the tools write; and what is refused versus
imported with a finding."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from connectors.billing import BillingBatch
from connectors.gcp_billing import GcpBillingConfig, GcpBillingConnector
from connectors.sdk import BILLING_SCHEMA
from service.billing.catalog import fill_gpus

SEP = dt.datetime(2025, 9, 1, tzinfo=dt.UTC)
OCT = dt.datetime(2025, 10, 1, tzinfo=dt.UTC)
VM = "//compute.googleapis.com/projects/ml-lab/zones/us-central1-a/instances/1111222233334444555"
ACCOUNT = "01A2B3-C4D5E6-F7A8B9"


def read(path: Path) -> list[BillingBatch]:
    config = GcpBillingConfig(name="bills", type="gcp_billing", path=str(path))
    batches = []
    for batch in GcpBillingConnector(config).read(SEP, OCT):
        assert isinstance(batch, BillingBatch), batch
        assert batch.read == batch.lines.height + len(batch.refused) + batch.skipped
        batches.append(batch)
    return batches


def record(
    sku: str,
    cost: float,
    *,
    start: str = "2025-09-01T00:00:00",
    end: str = "2025-09-01T01:00:00",
    resource: str | None = VM,
    usage: tuple[float, str, float, str] = (3600.0, "seconds", 1.0, "hour"),
    credits: list[dict[str, object]] | None = None,
    labels: list[dict[str, str]] | None = None,
    system_labels: list[dict[str, str]] | None = None,
    cost_type: str = "regular",
) -> dict[str, object]:
    """One row of the export in its nested (JSONL) form."""
    row: dict[str, object] = {
        "billing_account_id": ACCOUNT,
        "service": {"id": "6F81-5844-456A", "description": "Compute Engine"},
        "sku": {"id": hashlib.sha1(sku.encode()).hexdigest()[:4].upper(), "description": sku},
        "usage_start_time": start,
        "usage_end_time": end,
        "project": {"id": "ml-lab", "name": "ML lab", "labels": [{"key": "env", "value": "lab"}]},
        "labels": labels or [],
        "system_labels": system_labels or [],
        "location": {
            "location": "us-central1",
            "country": "US",
            "region": "us-central1",
            "zone": "us-central1-a",
        },
        "cost": cost,
        "currency": "USD",
        "usage": dict(zip(("amount", "unit", "amount_in_pricing_units", "pricing_unit"), usage, strict=True)),
        "credits": credits or [],
        "invoice": {"month": "202509"},
        "cost_type": cost_type,
    }
    if resource is not None:
        row["resource"] = {"name": "a2-train", "global_name": resource}
    return row


SPEC = [
    {"key": "compute.googleapis.com/cores", "value": "12"},
    {"key": "compute.googleapis.com/machine_spec", "value": "a2-highgpu-1g"},
]
TEAM = [{"key": "team", "value": "ml"}, {"key": "cost-center", "value": "42"}]
FREE = {"name": "FreeTrial", "amount": -3.2e-05, "full_name": None, "id": "FreeTrial", "type": "PROMOTION"}
SUD = {"name": "Sustained use", "amount": -0.586782, "type": "SUSTAINED_USAGE_DISCOUNT"}

# the same rows in every test; the timestamps in the forms tools write (koku-nise: no zone;
# BigQuery's CSV: " UTC"; pandas: "+00:00"; an ISO "Z")
ROWS = [
    record("Nvidia Tesla A100 GPU running in Americas", 2.933908, credits=[SUD, FREE], labels=TEAM),
    record(
        "A2 Instance Core running in Americas",
        3.2e-05,  # the issue's row: 0.000032 with a -0.000032 credit is 0 effective
        start="2025-09-01 00:00:00 UTC",
        end="2025-09-01 01:00:00 UTC",
        credits=[FREE],
        labels=TEAM,
        system_labels=SPEC,
        usage=(43200.0, "seconds", 12.0, "hour"),
    ),
    record(
        "A2 Instance Ram running in Americas",
        0.05,
        start="2025-09-01 00:00:00+00:00",
        end="2025-09-01 01:00:00+00:00",
        usage=(-5.0, "byte-seconds", -5.0, "gibibyte hour"),  # negative usage: imported, flagged
        system_labels=SPEC,
    ),
    record(
        "Tax", 1.23, start="2025-09-01T00:00:00Z", end="2025-09-01T01:00:00Z", resource=None, cost_type="tax"
    ),
    record("Promotional rebate", -0.5, resource=None, cost_type="rebate"),  # unknown cost_type
    record(
        "Standard Storage US Multi-region",
        0.0,
        resource=None,
        usage=(1e-05, "byte-seconds", 2.5e-07, "gibibyte month"),
    ),
]


def jsonl(rows: list[dict[str, object]]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def _cell(value: object, style: str) -> str:
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return repr(value) if style == "python" else json.dumps(value)
    return str(value)


def flat_csv(rows: list[dict[str, object]], style: str) -> bytes:
    """The rows as a flat CSV:

    * ``"dotted"`` — koku / koku-nise: ``service.id`` headers, ``credits`` as a Python literal
      (single quotes, ``None``), ``labels`` / ``system_labels`` / ``project.labels`` as JSON, CRLF;
    * ``"json"`` — a query's output: ``service_id`` headers, ``credits_json`` / ``labels_json`` /
      ``system_labels_json`` as JSON;
    * ``"records"`` — pandas' ``to_csv`` of a query's rows: each RECORD column whole in one cell
      (``service``, ``sku``, ``resource``, ``usage``… as Python literals).
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n" if style == "dotted" else "\n")
    if style == "records":
        names = list(dict.fromkeys(k for r in rows for k in r))
        writer.writerow(names)
        for r in rows:
            writer.writerow(_cell(r.get(k), "python") for k in names)
        return out.getvalue().encode()
    sep = "." if style == "dotted" else "_"
    suffix = "" if style == "dotted" else "_json"
    columns: dict[str, tuple[str, str | None]] = {}  # header → (top-level field, sub-field)
    for r in rows:
        for k, v in r.items():
            if isinstance(v, dict):
                columns.update({f"{k}{sep}{f}": (k, f) for f in v if not isinstance(v[f], list)})
                if k == "project":
                    columns[f"project{sep}labels{suffix}"] = ("project", "labels")
            elif k in ("credits", "labels", "system_labels"):
                columns[k + suffix] = (k, None)
            else:
                columns[k] = (k, None)
    writer.writerow(columns)
    for r in rows:
        cells = []
        for top, field in columns.values():
            value = r.get(top)
            if field is not None:
                value = value.get(field) if isinstance(value, dict) else None
            python = style == "dotted" and top == "credits"
            cells.append(_cell(value, "python" if python else "json"))
        writer.writerow(cells)
    return out.getvalue().encode()


#: Columns in which a flat CSV and a JSONL of the same rows legitimately differ:
#: ``source_file`` (another file), ``line_no`` (the CSV's header is line 1, so its records start at
#: line 2) and ``line_key`` (the SHA-1 of the raw line: the same row is other bytes in CSV and
#: JSONL). Every other column must be equal.
DIFFERING = ("source_file", "line_no", "line_key")


@pytest.mark.parametrize("style", ["dotted", "json", "records"])
def test_a_flat_csv_and_a_jsonl_of_the_same_rows_give_the_same_lines(tmp_path: Path, style: str) -> None:
    (tmp_path / "export.jsonl").write_bytes(jsonl(ROWS))
    (tmp_path / "export.csv").write_bytes(flat_csv(ROWS, style))
    flat, nested = read(tmp_path / "export.csv")[0], read(tmp_path / "export.jsonl")[0]
    assert (flat.read, len(flat.refused), nested.read, len(nested.refused)) == (6, 0, 6, 0)
    assert flat.lines.columns == list(BILLING_SCHEMA)
    for column in DIFFERING:  # these do differ, for the reasons above
        assert flat.lines[column].to_list() != nested.lines[column].to_list(), column
    same = [c for c in BILLING_SCHEMA if c not in DIFFERING]
    assert flat.lines.select(same).to_dicts() == nested.lines.select(same).to_dicts()
    assert flat.lines["line_no"].to_list() == [2, 3, 4, 5, 6, 7]
    assert nested.lines["line_no"].to_list() == [1, 2, 3, 4, 5, 6]
    # the same findings, each naming the column as its file spells it
    assert [(f.rule, f.count, f.examples[0][1]) for f in flat.findings] == [
        (f.rule, f.count, f.examples[0][1]) for f in nested.findings
    ]
    assert_the_rows(flat.lines)


def assert_the_rows(lines: pl.DataFrame) -> None:
    """The six rows' lines, by hand."""
    rows = lines.to_dicts()
    gpu, core, ram, tax, rebate, storage = rows
    # money: cost + Σ credits (credits are negative); list = cost
    assert [r["effective_cost"] for r in rows] == [
        Decimal("2.347094"),  # 2.933908 - 0.586782 - 0.000032
        Decimal("0"),  # 0.000032 - 0.000032: the issue's row
        Decimal("0.05"),
        Decimal("1.23"),
        Decimal("-0.5"),
        Decimal("0"),
    ]
    assert [r["billed_cost"] for r in rows] == [r["effective_cost"] for r in rows]
    assert [r["list_cost"] for r in rows] == [
        Decimal(t) for t in ("2.933908", "0.000032", "0.05", "1.23", "-0.5", "0")
    ]
    # the project's labels beside the resource's, marked (service.billing.tags: cloud.project_label:)
    assert gpu["tags"] == (
        '{"team":"ml","cost-center":"42","gcp:project_label:env":"lab",'
        '"gcp:credit:PROMOTION":"-0.000032000","gcp:credit:SUSTAINED_USAGE_DISCOUNT":"-0.586782000"}'
    )
    assert core["tags"] == (
        '{"team":"ml","cost-center":"42","gcp:project_label:env":"lab","gcp:credit:PROMOTION":"-0.000032000"}'
    )
    # GPU facts: the machine type from the system labels, for every row of the resource
    assert [r["instance_type"] for r in rows] == ["a2-highgpu-1g"] * 3 + [None] * 3
    assert (gpu["is_gpu_sku"], gpu["gpu_hours"], gpu["gpu_count"]) == (True, Decimal(1), 1)
    assert (core["is_gpu_sku"], core["gpu_hours"], core["gpu_count"]) == (False, Decimal(0), 1)
    assert (core["usage_quantity"], core["usage_unit"], core["resource_id"]) == (
        Decimal(12),
        "hour",
        "1111222233334444555",
    )
    assert (ram["usage_quantity"], ram["charge_category"], ram["pricing_model"]) == (
        Decimal(-5),
        "Usage",
        "on_demand",
    )
    # every timestamp form is the same hour
    assert {(r["charge_start"], r["charge_end"]) for r in rows} == {
        (SEP, SEP + dt.timedelta(hours=1)),
    }
    assert (tax["charge_category"], tax["charge_type"], tax["pricing_model"]) == ("Tax", "tax", None)
    assert (rebate["charge_category"], rebate["charge_type"]) == ("Adjustment", "rebate")
    assert (storage["usage_quantity"], storage["region"], storage["resource_id"]) == (
        Decimal("0.00000025"),
        "us-central1",
        None,
    )
    assert {r["account"] for r in rows} == {"ml-lab"} and {r["billing_account"] for r in rows} == {ACCOUNT}


def test_findings_of_the_rows(tmp_path: Path) -> None:
    (tmp_path / "export.csv").write_bytes(flat_csv(ROWS, "dotted"))
    (batch,) = read(tmp_path / "export.csv")
    found = {(f.rule, f.column): (f.count, f.examples, f.provider) for f in batch.findings}
    assert found == {
        ("unknown_value", "cost_type"): (1, ((6, "rebate"),), "gcp"),
        ("negative_usage", "usage.amount"): (1, ((4, "-5.0"),), "gcp"),
        ("negative_usage", "usage.amount_in_pricing_units"): (1, ((4, "-5.0"),), "gcp"),
    }


def test_the_issue_row_credits_as_json_in_a_credits_column(tmp_path: Path) -> None:
    """A ``credits`` column of valid JSON reduces the cost (it was ignored: only ``credits_json``
    was read), and an a2-highgpu-1g row gets its machine type, tags and — from the catalog — its
    GPU count."""
    header = (
        "billing_account_id,sku.description,usage_start_time,usage_end_time,project.id,labels,system_labels,"
        "cost,currency,usage.amount,usage.unit,credits,invoice.month,cost_type,resource.name,resource.global_name"
    )
    row = [
        ACCOUNT,
        "Instance Core running in Americas",
        "2025-09-01T00:00:00",
        "2025-09-01T01:00:00",
        "example-project-id",
        '[{"key": "environment", "value": "ci"}]',
        json.dumps(SPEC),
        "3.2e-05",
        "USD",
        "1997.8989358",
        "seconds",
        '[{"name": "FreeTrial", "amount": -3.2e-05, "full_name": "", "type": "PROMOTION"}]',
        "202509",
        "regular",
        "gpu-1",
        VM,
    ]
    out = io.StringIO()
    csv.writer(out).writerows([header.split(","), row])
    (tmp_path / "nise.csv").write_text(out.getvalue())
    (batch,) = read(tmp_path / "nise.csv")
    line = batch.lines.row(0, named=True)
    assert (line["list_cost"], line["billed_cost"], line["effective_cost"]) == (
        Decimal("0.000032"),
        Decimal(0),
        Decimal(0),
    )
    assert (line["instance_type"], line["tags"]) == (
        "a2-highgpu-1g",
        '{"environment":"ci","gcp:credit:PROMOTION":"-0.000032000"}',
    )
    assert line["usage_quantity"] == Decimal("1997.8989358")
    assert fill_gpus(batch.lines)["gpu_count"].to_list() == [1]


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("2025-09-01T00:00:00", "2025-09-01T01:00:00"),  # koku-nise: no zone (UTC)
        ("2025-09-01 00:00:00 UTC", "2025-09-01 01:00:00 UTC"),  # BigQuery's CSV export
        ("2025-09-01 00:00:00.000 UTC", "2025-09-01 01:00:00.000000 UTC"),
        ("2025-09-01 00:00:00+00:00", "2025-09-01 01:00:00+00:00"),  # pandas (koku's test data)
        ("2025-09-01T00:00:00Z", "2025-09-01T01:00:00.000Z"),
        ("2025-08-31T17:00:00-07:00", "2025-08-31T18:00:00-0700"),  # the legacy export's offsets
        ("2025-09-01T00:00Z", "2025-09-01 01:00"),  # minute precision
    ],
)
def test_timestamp_forms(tmp_path: Path, start: str, end: str) -> None:
    rows = [record("Tax", 1.0, start=start, end=end, resource=None, cost_type="tax")]
    (tmp_path / "e.csv").write_bytes(flat_csv(rows, "json"))
    (tmp_path / "e.jsonl").write_bytes(jsonl(rows))
    for batch in read(tmp_path):
        assert batch.refused == []
        assert batch.lines.select("charge_start", "charge_end").row(0) == (SEP, SEP + dt.timedelta(hours=1))


def test_a_date_alone_is_midnight_utc(tmp_path: Path) -> None:
    rows = [record("Tax", 1.0, start="2025-09-01", end="2025-09-02", resource=None, cost_type="tax")]
    (tmp_path / "e.csv").write_bytes(flat_csv(rows, "json"))
    (batch,) = read(tmp_path)
    assert batch.lines.select("charge_start", "charge_end").row(0) == (SEP, SEP + dt.timedelta(days=1))


def test_cost_type_spellings(tmp_path: Path) -> None:
    spellings = ["Regular", "TAX", "rounding_error", "Rounding Error", "", "credit-note"]
    rows = [record("Thing", 1.0, resource=None, cost_type=t) for t in spellings]
    (tmp_path / "e.csv").write_bytes(flat_csv(rows, "json"))
    (batch,) = read(tmp_path)
    assert batch.lines["charge_category"].to_list() == [
        "Usage",
        "Tax",
        "Adjustment",
        "Adjustment",
        "Usage",  # empty: regular, as exports older than the column
        "Adjustment",  # unknown: booked, kept out of usage, flagged
    ]
    assert batch.lines["charge_type"].to_list() == [*spellings[:4], None, "credit-note"]
    ((rule, column, count, examples),) = [(f.rule, f.column, f.count, f.examples) for f in batch.findings]
    assert (rule, column, count, examples) == ("unknown_value", "cost_type", 1, ((7, "credit-note"),))


def test_refused_only_for_unreadable_money_the_rest_flagged(tmp_path: Path) -> None:
    """credits that cannot be decoded or an amount that is not a number: refused (the effective cost
    would be wrong), with the row's cost kept; an unreadable usage amount, list cost, labels or
    system labels: imported, flagged, the value dropped."""
    header = [
        "billing_account_id",
        "sku_description",
        "usage_start_time",
        "usage_end_time",
        "project_id",
        "labels_json",
        "system_labels_json",
        "cost",
        "cost_at_list",
        "currency",
        "usage_amount",
        "usage_unit",
        "credits",
        "invoice_month",
        "resource_name",
        "resource_global_name",
    ]
    good = [
        ACCOUNT,
        "A2 Instance Core running in Americas",
        "2025-09-01 00:00:00 UTC",
        "2025-09-01 01:00:00 UTC",
    ]
    good += ["p", json.dumps(TEAM), json.dumps(SPEC), "2.5", "3.0", "USD", "3600", "seconds", "[]", "202509"]
    good += ["vm", VM]

    def row(**cells: str) -> list[str]:
        return [cells.get(h, v) for h, v in zip(header, good, strict=True)]

    rows = [
        row(credits="[{'amount': -0.5, 'type': 'PROMOTION'"),  # 2: not a literal: refused
        row(credits='[{"amount": "half", "type": "PROMOTION"}]'),  # 3: refused
        row(credits='{"amount": "-0.5", "type": "PROMOTION"}'),  # 4: one credit object: read
        row(usage_amount="n/a"),  # 5: flagged, no quantity
        row(cost_at_list="#VALUE!"),  # 6: flagged, list cost = cost
        row(labels_json="team=ml"),  # 7: flagged, labels dropped
        row(
            system_labels_json="[{'key': 'compute.googleapis.com/machine_spec', 'value': 'a2-highgpu-1g'}]"
        ),  # 8
        row(system_labels_json="[1, 2]", resource_global_name=VM + "9"),  # 9: flagged, no machine type
        row(cost="NaN"),  # 10: refused: no cost
        row(currency=""),  # 11: refused
        row(credits="[{'amount': -0.5, 'type': 'PROMOTION', 'x': __import__('os')}]"),  # 12: never evaluated
    ]
    out = io.StringIO()
    csv.writer(out).writerows([header, *rows])
    (tmp_path / "e.csv").write_text(out.getvalue())
    (batch,) = read(tmp_path)
    refused = {r.line: (r.column, r.reason.split(":")[0], r.cost) for r in batch.refused}
    assert refused == {
        2: ("credits", "credits are not a list of {name, amount, type} (JSON)", Decimal("2.5")),
        3: ("credits", "a credit amount that is not a number", Decimal("2.5")),
        10: ("cost", "not a number", None),
        11: ("currency", "unknown currency code", Decimal("2.5")),
        12: ("credits", "credits are not a list of {name, amount, type} (JSON)", Decimal("2.5")),
    }
    lines = {r["line_no"]: r for r in batch.lines.to_dicts()}
    assert sorted(lines) == [4, 5, 6, 7, 8, 9]
    assert lines[4]["effective_cost"] == Decimal("2")
    assert (lines[5]["usage_quantity"], lines[5]["effective_cost"]) == (None, Decimal("2.5"))
    assert (lines[6]["list_cost"], lines[6]["effective_cost"]) == (Decimal("2.5"), Decimal("2.5"))
    assert (lines[7]["tags"], lines[7]["instance_type"]) == (None, "a2-highgpu-1g")
    assert lines[8]["instance_type"] == "a2-highgpu-1g"  # a Python literal is read as JSON is
    assert (lines[9]["instance_type"], lines[9]["tags"]) == ("a2", '{"team":"ml","cost-center":"42"}')
    found = {(f.rule, f.column): (f.count, [line for line, _ in f.examples]) for f in batch.findings}
    assert found == {
        ("unreadable_number", "usage_amount"): (1, [5]),
        ("unreadable_number", "cost_at_list"): (1, [6]),
        ("unreadable_json", "labels_json"): (1, [7]),
        ("unreadable_json", "system_labels_json"): (1, [9]),
    }


def test_gpu_hours_beyond_the_resource_gpus_name_the_quantity_column(tmp_path: Path) -> None:
    """The driver's capacity finding names the column the quantity comes from, as the file spells it."""
    rows = [
        record("Nvidia Tesla A100 GPU running in Americas", 2.9, usage=(3600.0, "seconds", 1.0, "hour")),
        record(
            "Nvidia Tesla A100 GPU running in Americas",
            4.4,
            start="2025-09-01T01:00:00",
            end="2025-09-01T02:00:00",
            usage=(5400.0, "seconds", 1.5, "hour"),  # 1.5 GPU-hours in an hour of a 1-GPU VM
        ),
    ]
    (tmp_path / "e.csv").write_bytes(flat_csv(rows, "dotted"))
    (tmp_path / "e.jsonl").write_bytes(jsonl(rows))
    for batch, column in zip(read(tmp_path), ["usage.amount_in_pricing_units"] * 2, strict=True):
        (finding,) = batch.findings
        assert (finding.rule, finding.column, finding.count) == ("gpu_hours_over_capacity", column, 1)
        assert batch.lines["gpu_count"].to_list() == [1, 1]
