"""Public FOCUS files as they come (tests/fixtures/public/focus/ATTRIBUTION.md): every row whose
money can be read lands, per-provider billed and effective totals equal an independent sum of the
file (csv + Decimal here, not the connector's code), and the data-quality findings are exact."""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
from collections import defaultdict
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import polars as pl
from sqlalchemy import Engine, func, select

from connectors.billing import BillingBatch, BillingFileError
from connectors.focus import FocusConfig, FocusConnector
from service.billing.ingest import ingest_billing
from service.models import BillingLine

PUBLIC = Path(__file__).parent.parent / "fixtures" / "public" / "focus"
SAMPLE = PUBLIC / "focus_sample.csv.gz"
D = Decimal
#: The sample's ProviderName → the ledger's provider, written out by hand.
LEDGER_PROVIDER = {"AWS": "aws", "Microsoft": "azure", "Oracle": "oracle"}
WIDE = (dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(2025, 1, 1, tzinfo=dt.UTC))


def connector(path: Path) -> FocusConnector:
    return FocusConnector(FocusConfig(name="focus", type="focus", path=str(path)))


def batches(path: Path) -> list[BillingBatch]:
    out = list(connector(path).read(*WIDE))
    assert all(isinstance(b, BillingBatch) for b in out), out
    return [b for b in out if isinstance(b, BillingBatch)]


def records(path: Path) -> list[dict[str, str]]:
    with gzip.open(path, "rb") as raw:
        return list(csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", newline="")))


def money(text: str) -> Decimal | None:
    """A money cell as the file writes it; the literal NULL (or nothing) is no amount."""
    return None if text in ("", "NULL") else Decimal(text)


def independent_totals(path: Path, quantum: Decimal | None = None) -> dict[str, tuple[Decimal, Decimal]]:
    """Σ BilledCost and Σ EffectiveCost per provider, straight from the file; ``quantum``: each
    amount rounded half to even first (the ledger keeps 9 decimals)."""
    sums: dict[str, list[Decimal]] = defaultdict(lambda: [D(0), D(0)])
    for row in records(path):
        for i, column in enumerate(("BilledCost", "EffectiveCost")):
            value = money(row[column])
            if value is not None:
                sums[LEDGER_PROVIDER[row["ProviderName"]]][i] += (
                    value.quantize(quantum, rounding=ROUND_HALF_EVEN) if quantum else value
                )
    return {k: (v[0], v[1]) for k, v in sums.items()}


def line_totals(lines: pl.DataFrame) -> dict[str, tuple[Decimal, Decimal]]:
    grouped = lines.group_by("provider").agg(pl.col("billed_cost").sum(), pl.col("effective_cost").sum())
    return {p: (b, e) for p, b, e in grouped.iter_rows()}


def cents(totals: dict[str, tuple[Decimal, Decimal]]) -> dict[str, tuple[Decimal, Decimal]]:
    c = D("0.01")
    return {
        k: (b.quantize(c, ROUND_HALF_EVEN), e.quantize(c, ROUND_HALF_EVEN)) for k, (b, e) in totals.items()
    }


def test_the_finops_foundation_sample_imports_every_row() -> None:
    (batch,) = batches(SAMPLE)
    assert (batch.read, batch.lines.height, len(batch.refused), batch.skipped) == (1000, 1000, 0, 0)
    assert batch.read == batch.lines.height + len(batch.refused) + batch.skipped
    assert (batch.period_start, batch.period_end) == (
        dt.datetime(2024, 9, 1, tzinfo=dt.UTC),
        dt.datetime(2024, 11, 1, tzinfo=dt.UTC),  # one Oracle row belongs to the October bill
    )
    counts = dict(batch.lines.group_by("provider").len().iter_rows())
    assert counts == {"aws": 942, "azure": 51, "oracle": 7}


def test_per_provider_totals_equal_an_independent_sum_of_the_file() -> None:
    (batch,) = batches(SAMPLE)
    got = line_totals(batch.lines)
    # exactly, at the ledger's 1e-9 (the file writes 11 decimals; each amount rounds half to even)
    assert got == independent_totals(SAMPLE, D("1e-9"))
    assert got == {
        "aws": (D("18.006638626"), D("13.000000000")),
        "azure": (D("1.976514186"), D("1.976514186")),
        "oracle": (D("0.537073925"), D("0E-9")),
    }
    # to the cent, against the file's own unrounded sums
    assert cents(got) == cents(independent_totals(SAMPLE))


def test_the_sample_findings_are_exact_and_case_variants_are_no_finding() -> None:
    (batch,) = batches(SAMPLE)
    (finding,) = batch.findings  # 'Usage-based' (Oracle) is Usage-Based: matched, no finding
    assert (finding.file, finding.rule, finding.column, finding.provider, finding.count) == (
        str(SAMPLE),
        "negative_usage",
        "ConsumedQuantity",
        "azure",
        12,
    )
    assert finding.reason == "negative on a Usage row that is not a correction"
    assert finding.examples == (
        (956, "-0.001389000000000"),
        (961, "-0.000100000000000"),
        (963, "-0.001528156921268"),
        (964, "-0.000190000000000"),
        (965, "-1.000000000000000"),
    )
    negative = batch.lines.filter(pl.col("usage_quantity") < 0)
    assert negative["line_no"].to_list() == [956, 961, 963, 964, 965, 970, 973, 984, 989, 990, 1000, 1001]
    assert negative["billed_cost"].sum() == D("-0.161971300")  # imported, money and all


def test_oracle_rows_are_kept_as_provider_oracle() -> None:
    (batch,) = batches(SAMPLE)
    oracle = batch.lines.filter(pl.col("provider") == "oracle").sort("line_no")
    assert oracle["line_no"].to_list() == [927, 928, 943, 946, 949, 950, 952]
    assert oracle["charge_category"].to_list() == ["Usage"] * 4 + ["Adjustment"] * 2 + ["Usage"]
    assert oracle["pricing_model"].to_list() == [None] * 7  # PricingCategory empty in the file
    assert oracle["billed_cost"].sum() == D("0.537073925")
    first = oracle.row(0, named=True)
    assert (first["charge_start"], first["charge_end"], first["usage_unit"], first["usage_quantity"]) == (
        dt.datetime(2024, 9, 21, 17, tzinfo=dt.UTC),
        dt.datetime(2024, 9, 21, 18, tzinfo=dt.UTC),
        "GB Hours",
        D(8),
    )
    assert first["resource_id"].startswith("ocid6.instance.oc6.us-sanjose-6.")


def test_the_sample_lands_in_the_ledger_with_the_same_totals(engine: Engine) -> None:
    result = ingest_billing(
        engine,
        "focus",
        connector(SAMPLE),
        dt.datetime(2024, 9, 1, tzinfo=dt.UTC),
        dt.datetime(2024, 11, 1, tzinfo=dt.UTC),
        after_import=lambda engine, periods: None,
    )
    assert (result.read, result.accepted, result.refused) == (1000, 1000, 0)
    line = BillingLine.__table__.c
    query = select(
        line.provider, func.sum(line.billed_cost), func.sum(line.effective_cost), func.count()
    ).group_by(line.provider)
    with engine.connect() as conn:
        stored = {p: (D(b), D(e), n) for p, b, e, n in conn.execute(query)}
    expected = independent_totals(SAMPLE, D("1e-9"))
    assert {p: (b, e) for p, (b, e, _n) in stored.items()} == expected
    assert {p: n for p, (_b, _e, n) in stored.items()} == {"aws": 942, "azure": 51, "oracle": 7}


def test_minute_precision_timestamps_as_oci_writes_them(tmp_path: Path) -> None:
    header, rows = sample_rows([927, 943])
    for row in rows:
        row.update(
            BillingPeriodStart="2024-08-01T00:00Z",
            BillingPeriodEnd="2024-09-01T00:00Z",
            ChargePeriodStart="2024-08-16T00:00Z",
            ChargePeriodEnd="2024-08-16T01:00Z",
        )
    rows[1]["ChargePeriodEnd"] = "2024-08-16T00:30+00:00"
    path = write(tmp_path / "oci.csv", header, rows)
    (batch,) = batches(path)
    assert (batch.read, batch.lines.height, batch.refused) == (2, 2, [])
    assert (batch.period_start, batch.period_end) == (
        dt.datetime(2024, 8, 1, tzinfo=dt.UTC),
        dt.datetime(2024, 9, 1, tzinfo=dt.UTC),
    )
    assert batch.lines.select("charge_start", "charge_end").rows() == [
        (dt.datetime(2024, 8, 16, tzinfo=dt.UTC), dt.datetime(2024, 8, 16, 1, tzinfo=dt.UTC)),
        (dt.datetime(2024, 8, 16, tzinfo=dt.UTC), dt.datetime(2024, 8, 16, 0, 30, tzinfo=dt.UTC)),
    ]


def test_a_file_whose_every_row_is_refused_gives_no_line(tmp_path: Path) -> None:
    header, rows = sample_rows([2, 3, 927])
    for row, bad in zip(rows, ("12,5x", "NaN", "NULL"), strict=True):
        row["BilledCost"] = bad
    path = write(tmp_path / "bad.csv", header, rows)
    (batch,) = batches(path)
    assert (batch.read, batch.lines.height) == (3, 0)
    assert [(r.line, r.column, r.reason, r.cost) for r in batch.refused] == [
        (2, "BilledCost", "not a number: '12,5x'", None),
        (3, "BilledCost", "not a number: 'NaN'", None),
        (4, "BilledCost", "empty where a number is required: ''", None),  # NULL is no value
    ]
    assert batch.findings == []


def sample_rows(lines: list[int]) -> tuple[list[str], list[dict[str, str]]]:
    """The sample's header and its records on ``lines`` (the header is line 1)."""
    with gzip.open(SAMPLE, "rb") as raw:
        reader = csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", newline=""))
        rows = [dict(r) for n, r in enumerate(reader, start=2) if n in lines]
        return list(reader.fieldnames or []), rows


def write(path: Path, header: list[str], rows: list[dict[str, str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, header, quoting=csv.QUOTE_ALL)
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_a_gzip_that_is_not_the_sample_is_still_refused_whole(tmp_path: Path) -> None:
    # guard of the fixture itself: a truncated copy of the sample is a file error, not 0 rows
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(SAMPLE.read_bytes()[:20_000])
    (error,) = list(connector(path).read(*WIDE))
    assert isinstance(error, BillingFileError) and "truncated or corrupt gzip stream" in str(error)
