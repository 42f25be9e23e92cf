"""``aws_cur`` on the shared September 2025 fixtures (fixtures/README.md, AWS): every total exact.

Both layouts (CUR 2.0 and legacy), and the same CUR 2.0 rows as CSV.gz, ZIP, Parquet (real maps,
floats and timestamps, as Data Exports writes them) and read in small chunks give the same lines.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import json
import zipfile
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from connectors.aws_cur import AwsCurConfig, AwsCurConnector
from connectors.billing import BILLING_SCHEMA, BillingBatch, BillingSource
from service.billing.catalog import fill_gpus

FIXTURES = Path(__file__).parents[1] / "fixtures" / "aws"
CUR2 = FIXTURES / "cur2_2025-09_daily.csv"
LEGACY = FIXTURES / "cur_legacy_2025-09_daily.csv"
SEP, OCT = dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC)
R1, R2, R3, R4 = "i-0d1e4c9a2f7b3e801", "i-0a7c3f1e9d5b2c402", "i-05b8e2d7c4a1f9603", "i-09f3a6c8e1d7b2504"


def read(path: Path, start: dt.datetime = SEP, end: dt.datetime = OCT, **keys: object) -> list[BillingBatch]:
    with AwsCurConnector(AwsCurConfig(name="bills", path=str(path), **keys)) as connector:
        assert isinstance(connector, BillingSource)
        batches = list(connector.read(start, end))
    assert all(isinstance(b, BillingBatch) for b in batches), batches
    return batches


def lines_of(batches: list[BillingBatch]) -> pl.DataFrame:
    return pl.concat([b.lines for b in batches])


def total(frame: pl.DataFrame, column: str) -> Decimal:
    return frame[column].sum()


@pytest.mark.parametrize("fixture", [CUR2, LEGACY], ids=["cur2", "legacy"])
def test_fixture_totals(fixture: Path) -> None:
    batches = read(fixture)
    assert len(batches) == 1
    batch = batches[0]
    assert (batch.read, batch.lines.height, len(batch.refused), batch.skipped) == (137, 137, 0, 0)
    assert (batch.period_start, batch.period_end, batch.assembly_id) == (SEP, OCT, None)
    lines = batch.lines
    assert lines.schema == pl.Schema(BILLING_SCHEMA)
    assert lines["line_key"].n_unique() == 137
    assert set(lines["provider"]) == {"aws"}
    assert set(lines["billing_account"]) == {"999988887777"} and set(lines["account"]) == {"111122223333"}

    # Cash: every row's unblended cost; the SP covered/negation pair cancels.
    assert total(lines, "billed_cost") == Decimal("32593.3144")
    by_type = {
        r["charge_type"]: r["billed_cost"]
        for r in lines.group_by("charge_type").agg(pl.sum("billed_cost")).to_dicts()
    }
    assert by_type["SavingsPlanCoveredUsage"] == Decimal("39628.80")
    assert by_type["SavingsPlanNegation"] == Decimal("-39628.80")
    assert by_type["SavingsPlanRecurringFee"] == Decimal("27740.16")
    # Amortized: covered rows carry the SP accrual, fee rows only unused commitment (0 here).
    assert total(lines, "effective_cost") == Decimal("32593.3144")
    gpu = lines.filter(pl.col("instance_type").is_not_null())
    assert total(gpu, "effective_cost") == Decimal("32449.3144")
    assert total(gpu, "list_cost") == Decimal("44746.24")
    per_resource = dict(gpu.group_by("resource_id").agg(pl.sum("effective_cost")).iter_rows())
    assert per_resource == {
        R1: Decimal("3302.40"),
        R2: Decimal("27740.16"),
        R3: Decimal("1134.40"),
        R4: Decimal("272.3544"),
        None: Decimal("0"),  # the 30 negations
    }
    fees = lines.filter(pl.col("charge_type") == "SavingsPlanRecurringFee")
    assert set(fees["charge_category"]) == {"Purchase"} and set(fees["effective_cost"]) == {Decimal(0)}
    assert set(fees["pricing_model"]) == {None}

    # GPU-hours from the bill's own product "gpu" attribute: 60×8 + 720×8 + 200×4 + 120×4.
    assert total(lines, "gpu_hours") == Decimal("7520")
    hours = dict(
        lines.filter(pl.col("gpu_hours") > 0).group_by("resource_id").agg(pl.sum("gpu_hours")).iter_rows()
    )
    assert hours == {R1: Decimal(480), R2: Decimal(5760), R3: Decimal(800), R4: Decimal(480)}
    instance_hours = lines.filter(pl.col("gpu_hours") > 0)["usage_quantity"].sum()
    assert instance_hours == Decimal("1100")
    negations = lines.filter(pl.col("charge_type") == "SavingsPlanNegation")
    assert negations.height == 30 and set(negations["gpu_hours"]) == {Decimal(0)}
    assert set(negations["gpu_count"]) == {8}
    # The catalog (what the ingestor does) gives the same without the bill's counts.
    filled = fill_gpus(
        lines.with_columns(
            pl.lit(None).cast(pl.Int32).alias("gpu_count"),
            pl.lit(None).cast(BILLING_SCHEMA["gpu_hours"]).alias("gpu_hours"),
        )
    )
    assert total(filled, "gpu_hours") == Decimal("7520")
    assert filled["gpu_count"].to_list() == lines["gpu_count"].to_list()

    spot = lines.filter(pl.col("pricing_model") == "spot")
    assert (
        spot.height == 5
        and set(spot["resource_id"]) == {R4}
        and set(spot["instance_type"]) == {"g5.12xlarge"}
    )
    assert dict(lines.group_by("pricing_model").len().iter_rows()) == {
        "on_demand": 42,
        "spot": 5,
        "commitment": 60,
        None: 30,
    }
    assert set(lines["region"].drop_nulls()) == {"us-east-1"}
    assert set(lines["currency"]) == {"USD"}
    ebs = lines.filter(pl.col("resource_id") == "vol-0c4e7a9b2d1f3e605")
    assert ebs.height == 30 and total(ebs, "effective_cost") == Decimal("144.00")
    assert set(ebs["gpu_hours"]) == {None} and set(ebs["instance_type"]) == {None}

    first = lines.row(0, named=True)
    assert first["line_key"] == "718049f58adbc9a968b634db631aa4d758c7e11429f615b59392:2025-09-01T00:00:00Z"
    assert first["charge_start"] == SEP and first["charge_end"] == SEP + dt.timedelta(days=1)
    assert (
        first["commitment_id"]
        == "arn:aws:savingsplans::111122223333:savingsplan/3f2a9c1e-7b4d-4e8a-9c6f-1a2b3c4d5e6f"
    )
    assert first["line_no"] == 2 and first["usage_unit"] == "Hrs" and first["sku"] == "3D4V8UAYEMB38GU2"

    keys = set().union(*(json.loads(t).keys() for t in lines["tags"]))
    if fixture == CUR2:
        assert keys == {"user_team", "user_project", "user_cost_center"}
    else:
        assert keys == {"user:team", "user:project", "user:cost-center"}
    assert json.loads(lines.filter(pl.col("resource_id") == R3)["tags"][0]) == {
        ("user_" if fixture == CUR2 else "user:") + k: v
        for k, v in {
            "team": "inference",
            "project": "chat-serving",
            ("cost_center" if fixture == CUR2 else "cost-center"): "cc-2001",
        }.items()
    }


def comparable(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.drop("source_file", "line_no", "tags")


def test_legacy_and_cur2_give_the_same_lines() -> None:
    cur2, legacy = lines_of(read(CUR2)), lines_of(read(LEGACY))
    assert comparable(cur2).equals(comparable(legacy))
    assert cur2["line_no"].to_list() == legacy["line_no"].to_list()


def test_gzip_zip_and_parquet_give_identical_lines(tmp_path: Path) -> None:
    plain = lines_of(read(CUR2))
    data = CUR2.read_bytes()
    (tmp_path / "gz").mkdir()
    (tmp_path / "gz" / "cur-00001.csv.gz").write_bytes(gzip.compress(data))
    gz = lines_of(read(tmp_path / "gz"))
    assert gz.drop("source_file").equals(plain.drop("source_file"))
    assert set(gz["source_file"]) == {str(tmp_path / "gz" / "cur-00001.csv.gz")}

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("cur-00001.csv", data)
    (tmp_path / "cur-00001.csv.zip").write_bytes(buffer.getvalue())
    assert (
        lines_of(read(tmp_path / "cur-00001.csv.zip")).drop("source_file").equals(plain.drop("source_file"))
    )

    # Parquet as Data Exports writes it: maps, doubles, timestamps.
    text = pl.read_csv(CUR2, infer_schema=False)
    maps = {
        c: pl.Series(c, [[{"key": k, "value": v} for k, v in json.loads(t).items()] for t in text[c]])
        for c in ("product", "resource_tags", "cost_category")
    }
    numbers = [
        c for c in text.columns if c.endswith(("_cost", "_amount", "_rate", "_to_date", "_commitment"))
    ]
    times = [
        "line_item_usage_start_date",
        "line_item_usage_end_date",
        "bill_billing_period_start_date",
        "bill_billing_period_end_date",
    ]
    typed = text.with_columns(
        *maps.values(),
        *(pl.col(c).cast(pl.Float64) for c in numbers),
        *(pl.col(c).str.to_datetime("%Y-%m-%dT%H:%M:%SZ", time_zone="UTC") for c in times),
    )
    assert typed.schema["resource_tags"] == pl.List(pl.Struct({"key": pl.String, "value": pl.String}))
    typed.write_parquet(tmp_path / "cur-00001.snappy.parquet")
    parquet = lines_of(read(tmp_path / "cur-00001.snappy.parquet"))
    assert parquet.drop("source_file", "line_no").equals(plain.drop("source_file", "line_no"))
    assert parquet["line_no"].to_list() == list(range(1, 138))  # Parquet: record numbers


def test_small_chunks_give_the_same_lines() -> None:
    whole = lines_of(read(CUR2))
    batches = read(CUR2, chunk_rows=10)
    assert len(batches) == 14
    assert sum(b.read for b in batches) == 137
    assert all(b.period_start == SEP and b.period_end == OCT for b in batches)
    assert lines_of(batches).equals(whole)


def test_only_billing_periods_overlapping_the_window(tmp_path: Path) -> None:
    assert read(CUR2, dt.datetime(2025, 10, 1, tzinfo=dt.UTC), dt.datetime(2025, 11, 1, tzinfo=dt.UTC)) == []
    assert read(CUR2, dt.datetime(2025, 8, 1, tzinfo=dt.UTC), dt.datetime(2025, 9, 1, tzinfo=dt.UTC)) == []
    assert (
        len(read(CUR2, dt.datetime(2025, 9, 30, tzinfo=dt.UTC), dt.datetime(2025, 9, 30, 1, tzinfo=dt.UTC)))
        == 1
    )
    # A directory: CUR files only (other files are not report files), recursively.
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "cur.csv").write_bytes(CUR2.read_bytes())
    (tmp_path / "notes.json").write_text("{}")
    assert [b.read for b in read(tmp_path)] == [137]


def test_usage_types_outside_us_east_1(tmp_path: Path) -> None:
    rows = list(csv.reader(io.StringIO(CUR2.read_text())))
    header, body = rows[0], rows[1:]
    index = {c: i for i, c in enumerate(header)}
    picked = []
    for row in body:
        if row[index["line_item_usage_type"]] in ("BoxUsage:g5.12xlarge", "SpotUsage:g5.12xlarge"):
            row = list(row)
            row[index["line_item_usage_type"]] = "USE2-" + row[index["line_item_usage_type"]]
            row[index["product_instance_type"]] = ""
            row[index["product"]] = "{}"
            picked.append(row)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([header, *picked])
    (tmp_path / "use2.csv").write_text(out.getvalue())
    lines = lines_of(read(tmp_path / "use2.csv"))
    assert lines.height == 14
    assert set(lines["instance_type"]) == {"g5.12xlarge"}
    assert dict(lines.group_by("pricing_model").len().iter_rows()) == {"on_demand": 9, "spot": 5}
    assert set(lines["gpu_count"]) == {None}  # the map had no "gpu": the catalog fills it
    assert total(fill_gpus(lines), "gpu_hours") == Decimal(1280)  # (200 + 120) × 4


def test_ingested_by_the_billing_ingestor(sqlite_url: str, tmp_path: Path) -> None:
    """The acceptance path: the ingestor stores every line; a newer delivery of the same period
    replaces the older one instead of adding to it."""
    from sqlalchemy import func, select

    from service.billing.ingest import ingest_billing
    from service.db import make_engine
    from service.models import BillingLine

    engine = make_engine(sqlite_url)
    try:
        (tmp_path / "cur.csv").write_bytes(CUR2.read_bytes())
        with AwsCurConnector(AwsCurConfig(name="bills", path=str(tmp_path))) as source:
            result = ingest_billing(engine, "bills", source, SEP, OCT, after_import=lambda *a: None)
        assert (result.read, result.accepted, result.refused, result.skipped) == (137, 137, 0, 0)
        assert result.unknown_types == ()
        # A newer export of the same period under another name (the EBS rows gone).
        (tmp_path / "cur.csv").unlink()
        kept = [
            line for line in CUR2.read_text().splitlines(keepends=True) if "vol-0c4e7a9b2d1f3e605" not in line
        ]
        (tmp_path / "cur-v2.csv").write_text("".join(kept))
        with AwsCurConnector(AwsCurConfig(name="bills", path=str(tmp_path))) as source:
            again = ingest_billing(engine, "bills", source, SEP, OCT, after_import=lambda *a: None)
        assert (again.read, again.accepted) == (107, 107)
        with engine.connect() as conn:
            count, billed, gpu_hours = conn.execute(
                select(func.count(), func.sum(BillingLine.billed_cost), func.sum(BillingLine.gpu_hours))
            ).one()
            gpu_effective = conn.execute(
                select(func.sum(BillingLine.effective_cost)).where(BillingLine.instance_type.is_not(None))
            ).scalar_one()
        assert count == 107
        assert Decimal(billed) == Decimal("32593.3144") - Decimal("144")
        assert Decimal(gpu_effective) == Decimal("32449.3144")
        assert Decimal(gpu_hours) == Decimal("7520")
    finally:
        engine.dispose()
