"""gcp_billing on the public samples of ``fixtures/public/gcp`` (see its ATTRIBUTION.md): koku's own
test exports, byte for byte (the flat CSV koku's downloader writes, standard and resource-level),
and koku-nise's GCP report (in its format, our rows) as CSV and as JSON Lines. For each: every row
read is accepted or refused, none refused (their money is readable), and the per-project cost and
effective cost equal an independent sum of the file (the csv/json modules and Decimal here, each
amount rounded to the ledger's 1e-9 as the connector does)."""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
from collections import defaultdict
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import polars as pl
import pytest

from connectors.billing import BillingBatch
from connectors.gcp_billing import GcpBillingConfig, GcpBillingConnector
from connectors.sdk import BILLING_SCHEMA
from service.billing.catalog import fill_gpus

SAMPLES = Path(__file__).parents[1] / "fixtures" / "public" / "gcp"
NANO = Decimal("1e-9")
# a credit's amount in a cell, JSON ("amount": -1e-06) or a Python literal ('amount': -1e-06)
AMOUNT = re.compile(r"""["']amount["']:\s*(-?[0-9][0-9.eE+-]*)""")


def money(text: object) -> Decimal:
    return Decimal(str(text)).quantize(NANO, ROUND_HALF_EVEN)


def read(path: Path) -> BillingBatch:
    config = GcpBillingConfig(name="bills", type="gcp_billing", path=str(path))
    start, end = dt.datetime(2000, 1, 1, tzinfo=dt.UTC), dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
    (batch,) = GcpBillingConnector(config).read(start, end)
    assert isinstance(batch, BillingBatch), batch
    return batch


def csv_totals(path: Path) -> tuple[int, dict[str, tuple[Decimal, Decimal]]]:
    """(rows, project → (Σ cost, Σ cost + credits)) of a flat CSV, by the csv module."""
    totals: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0), Decimal(0)])
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        cost = money(row["cost"])
        credits = sum((money(a) for a in AMOUNT.findall(row["credits"])), Decimal(0))
        totals[row["project.id"]][0] += cost
        totals[row["project.id"]][1] += cost + credits
    return len(rows), {p: (c, e) for p, (c, e) in totals.items()}


def jsonl_totals(path: Path) -> tuple[int, dict[str, tuple[Decimal, Decimal]]]:
    totals: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0), Decimal(0)])
    records = [
        json.loads(line, parse_float=Decimal, parse_int=Decimal) for line in path.read_text().splitlines()
    ]
    for record in records:
        credits = record["credits"] if isinstance(record["credits"], list) else [record["credits"]]
        cost = money(record["cost"])
        totals[record["project"]["id"]][0] += cost
        totals[record["project"]["id"]][1] += cost + sum((money(c["amount"]) for c in credits), Decimal(0))
    return len(records), {p: (c, e) for p, (c, e) in totals.items()}


def ledger_totals(lines: pl.DataFrame) -> dict[str, tuple[Decimal, Decimal]]:
    per = lines.group_by("account").agg(pl.col("list_cost").sum(), pl.col("effective_cost").sum())
    return {a: (c, e) for a, c, e in per.iter_rows()}


@pytest.mark.parametrize(
    ("name", "rows", "projects"),
    [
        ("koku_standard_export_2020-11.csv", 25, 1),
        ("koku_resource_export_2022-08.csv", 9, 1),
        ("nise_gpu_2025-09.csv", 48, 2),
        ("nise_gpu_2025-09.jsonl", 48, 2),
    ],
)
def test_every_row_is_booked_and_the_totals_are_the_files(name: str, rows: int, projects: int) -> None:
    path = SAMPLES / name
    batch = read(path)
    count, expected = (jsonl_totals if name.endswith(".jsonl") else csv_totals)(path)
    assert count == rows and len(expected) == projects
    assert (batch.read, batch.lines.height, batch.refused, batch.skipped) == (rows, rows, [], 0)
    assert batch.findings == []
    assert ledger_totals(batch.lines) == expected
    assert batch.lines["billed_cost"].to_list() == batch.lines["effective_cost"].to_list()
    assert batch.lines["currency"].unique().to_list() == ["USD"]


def test_the_totals_by_hand() -> None:
    """The independent sums above, pinned: a sum that silently dropped credits would show here."""
    # koku's real export: 0.000032 of cost, every cent of it cancelled by FreeTrial credits held
    # in a "credits" column as Python literals (the row: stored at 0.000032 before)
    assert csv_totals(SAMPLES / "koku_standard_export_2020-11.csv")[1] == {
        "billing-example-00000": (Decimal("0.000032"), Decimal("0")),
    }
    assert csv_totals(SAMPLES / "koku_resource_export_2022-08.csv")[1] == {
        "cloud-billing-292519": (Decimal("0.000012"), Decimal("0.000012")),
    }
    assert csv_totals(SAMPLES / "nise_gpu_2025-09.csv")[1] == {
        # 24 hours of the row: 0.000032 each, every one cancelled by its -0.000032 credit
        "example-project-id": (Decimal("0.000768"), Decimal("0")),
        # 0.369004210 = Σ of nise's float products, each rounded to 1e-9; twelve -0.01 credits
        "example-project-id-2": (Decimal("0.369004210"), Decimal("0.249004210")),
    }


def test_the_nise_csv_and_jsonl_give_the_same_lines_and_gpu_facts() -> None:
    """The same report as nise writes it for a bucket (CSV: credits as ``str([dict])``, labels as
    JSON) and for BigQuery (JSON Lines: one credit object, an empty placeholder when none)."""
    flat, nested = read(SAMPLES / "nise_gpu_2025-09.csv"), read(SAMPLES / "nise_gpu_2025-09.jsonl")
    same = [c for c in BILLING_SCHEMA if c not in ("source_file", "line_no", "line_key")]
    assert flat.lines.select(same).to_dicts() == nested.lines.select(same).to_dicts()
    vm = flat.lines.filter(pl.col("resource_id") == "2468013579246801357")
    assert vm.height == 24
    assert vm["instance_type"].unique().to_list() == ["a2-highgpu-1g"]
    assert vm["tags"].unique().to_list() == [
        '{"environment":"ci","project":"p1","gcp:project_label:step":"chair","gcp:project_label:year":"each",'
        '"gcp:credit:PROMOTION":"-0.000032000"}'
    ]
    assert vm["effective_cost"].unique().to_list() == [Decimal(0)]
    filled = fill_gpus(vm)
    assert filled["gpu_count"].unique().to_list() == [1]
    # GCP bills a GPU VM's GPUs on GPU SKU rows (nise writes none): its core rows bill no GPU-hours
    assert filled["gpu_hours"].to_list() == [Decimal(0)] * 24
    hours = flat.lines.select(pl.col("charge_start").min(), pl.col("charge_end").max()).row(0)
    assert hours == (dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 9, 2, tzinfo=dt.UTC))


def test_koku_python_literal_labels_become_tags_and_its_times_are_read() -> None:
    path = SAMPLES / "koku_standard_export_2020-11.csv"
    lines = read(path).lines
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    labelled = [r for r in rows if "goog-resource-type" in r["labels"]]
    assert len(labelled) > 0
    assert lines.filter(pl.col("tags").str.contains('"goog-resource-type":"bigquery_')).height == len(
        labelled
    )
    starts = sorted(dt.datetime.fromisoformat(r["usage_start_time"]) for r in rows)
    assert lines["charge_start"].sort().to_list() == starts
    assert lines["region"].null_count() == len(rows)  # the file names no region nor zone
