"""ingest_billing on SQLite and PostgreSQL with a fake billing source, and `gpu-ledger ingest`."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from billing_fakes import OCT, SEP, FakeBillingConfig, FakeBillingSource, batch, fake_billing_registry, usage
from sqlalchemy import Engine, select
from sqlmodel import Session
from typer.testing import CliRunner

import connectors.registry
from connectors.base import ConnectorStatus, RetriableError
from connectors.billing import BillingBatch, BillingFileError, RefusedRow
from service.billing.ingest import ingest_billing
from service.cli import app
from service.db import make_engine
from service.models import BillingFile, BillingLine, ConnectorRun, ConnectorState, Rejection

NOW = dt.datetime(2025, 10, 3, tzinfo=dt.UTC)
COLUMNS = [c for c in BillingLine.__table__.columns.keys() if c != "id"]  # noqa: SIM118


def source(*batches: object) -> FakeBillingSource:
    return FakeBillingSource(FakeBillingConfig(name="bills", type="fakebills"), batches=list(batches))  # type: ignore[arg-type]


def ingest(engine: Engine, src: FakeBillingSource, hook: object = None):  # type: ignore[no-untyped-def]
    calls: list[object] = []
    result = ingest_billing(
        engine,
        "bills",
        src,
        SEP,
        OCT,
        clock=lambda: NOW,
        after_import=hook or (lambda engine, periods: calls.append(periods)),  # type: ignore[arg-type]
    )
    return result, calls


def stored(engine: Engine) -> list[tuple[object, ...]]:
    table = BillingLine.__table__
    with engine.connect() as conn:
        rows = conn.execute(select(*[table.c[c] for c in COLUMNS]).order_by(table.c.line_key)).all()
    return [tuple(r) for r in rows]


def part_one() -> object:
    return batch(
        "s3://cur/2025-09/a1/part-1.csv",
        [
            usage("k1"),
            usage("k2", charge_type="Tax", charge_category="Tax", instance_type=None, usage_quantity=None,
                  usage_unit=None, billed_cost="12.5", effective_cost="12.5"),
            usage("k3", instance_type="g9.xlarge", resource_id="i-unknown"),
        ],
        refused=[RefusedRow("s3://cur/2025-09/a1/part-1.csv", 5, "line_item_usage_amount", "not a number")],
        skipped=2,
        assembly_id="a1",
    )  # fmt: skip


def part_two() -> object:
    return batch(
        "s3://cur/2025-09/a1/part-2.csv",
        [usage("k4", charge_start=dt.datetime(2025, 9, 30, tzinfo=dt.UTC), charge_end=OCT)],
        assembly_id="a1",
    )


def test_counts_add_up_and_lines_land(engine: Engine) -> None:
    result, calls = ingest(engine, source(part_one(), part_two()))
    assert (result.read, result.accepted, result.refused, result.skipped) == (7, 4, 1, 2)
    assert result.read == result.accepted + result.refused + result.skipped
    # 1 of 7 rows refused: above max_refused_rows_pct (1 %), so DEGRADED; the lines still land.
    assert result.status == ConnectorStatus.DEGRADED and result.unknown_types == ("g9.xlarge",)
    assert [(f.source_file, f.read, f.accepted, f.refused, f.skipped) for f in result.files] == [
        ("s3://cur/2025-09/a1/part-1.csv", 6, 3, 1, 2),
        ("s3://cur/2025-09/a1/part-2.csv", 1, 1, 0, 0),
    ]
    with Session(engine) as session:
        lines = {line.line_key: line for line in session.exec(select(BillingLine)).scalars()}
        assert (lines["k1"].gpu_count, lines["k1"].gpu_hours, lines["k1"].source) == (
            8,
            Decimal("192"),
            "bills",
        )
        assert (lines["k3"].gpu_count, lines["k3"].gpu_hours) == (None, None)  # unknown type: not 0 GPUs
        assert lines["k2"].billed_cost == Decimal("12.500000000")
        files = session.exec(select(BillingFile).order_by(BillingFile.source_file)).scalars().all()
        assert [
            (f.rows_read, f.rows_accepted, f.rows_refused, f.rows_skipped, f.assembly_id) for f in files
        ] == [
            (6, 3, 1, 2, "a1"),
            (1, 1, 0, 0, "a1"),
        ]
        assert files[0].billing_period_start == SEP
        (rejection,) = session.exec(select(Rejection)).scalars().all()
        assert (rejection.run_id, rejection.line, rejection.field) == (
            result.run_id,
            5,
            "line_item_usage_amount",
        )
        state = session.get(ConnectorState, "bills")
        run = session.get(ConnectorRun, result.run_id)
        assert state is not None and state.watermark == OCT and state.status == "DEGRADED"
        assert run is not None and (run.read, run.accepted, run.rejected, run.ledger_rows) == (5, 4, 1, 4)
    # One re-pricing call over the period (the lines lie inside it).
    assert calls == [[(SEP, OCT)]]


def test_reimport_of_the_same_period_is_a_no_op(engine: Engine) -> None:
    ingest(engine, source(part_one(), part_two()))
    first = stored(engine)
    result, _ = ingest(engine, source(part_one(), part_two()))
    assert stored(engine) == first and len(first) == 4
    assert result.lines_replaced == 4 and result.accepted == 4 and result.refused == 1


def test_newer_assembly_supersedes_the_period(engine: Engine) -> None:
    ingest(engine, source(part_one(), part_two()))
    newer = batch("s3://cur/2025-09/a2/part-1.csv", [usage("n1", billed_cost="99")], assembly_id="a2")
    result, _ = ingest(engine, source(newer))
    assert result.lines_replaced == 4
    assert [(r[COLUMNS.index("line_key")], r[COLUMNS.index("billed_cost")]) for r in stored(engine)] == [
        ("n1", Decimal("99.000000000"))
    ]
    with Session(engine) as session:
        names = [f.source_file for f in session.exec(select(BillingFile)).scalars()]
    assert names == ["s3://cur/2025-09/a2/part-1.csv"]


def test_file_without_period_replaces_only_its_own_lines(engine: Engine) -> None:
    ingest(
        engine,
        source(batch("a.csv", [usage("a1")], period=False), batch("b.csv", [usage("b1")], period=False)),
    )
    ingest(engine, source(batch("a.csv", [usage("a2")], period=False)))
    assert [r[COLUMNS.index("line_key")] for r in stored(engine)] == ["a2", "b1"]


def test_duplicate_line_key_is_refused_with_file_line_column(engine: Engine) -> None:
    # An August line, outside the September period the next import replaces.
    august = usage("z", charge_start=dt.datetime(2025, 8, 31, tzinfo=dt.UTC), charge_end=SEP)
    ingest(engine, source(batch("old.csv", [august], period=False)))
    dup = batch("s3://cur/p1.csv", [usage("x"), usage("y"), usage("x"), usage("z")])
    result, _ = ingest(engine, source(dup, batch("s3://cur/p2.csv", [usage("y")])))
    assert (result.read, result.accepted, result.refused) == (5, 2, 3)
    with Session(engine) as session:
        rejections = session.exec(select(Rejection).order_by(Rejection.file, Rejection.line)).scalars().all()
    got = [(r.file, r.line, r.field, r.reason) for r in rejections]
    assert got == [
        ("s3://cur/p1.csv", 4, "line_key", "duplicated line item id 'x': first on line 2 of s3://cur/p1.csv"),
        (
            "s3://cur/p1.csv",
            5,
            "line_key",
            "duplicated line item id 'z': already imported from line 2 of old.csv",
        ),
        ("s3://cur/p2.csv", 2, "line_key", "duplicated line item id 'y': first on line 3 of s3://cur/p1.csv"),
    ]
    assert [r[COLUMNS.index("line_key")] for r in stored(engine)] == ["x", "y", "z"]


def test_unreadable_file_is_recorded_and_the_others_land(engine: Engine) -> None:
    bad = BillingFileError("s3://cur/p2.csv.gz", "truncated or corrupt gzip stream", line=None)
    result, _ = ingest(engine, source(batch("p1.csv", [usage("a")], period=False), bad,
                                      batch("p3.csv", [usage("b")], period=False)))  # fmt: skip
    assert result.status == ConnectorStatus.PARSE_ERROR
    assert [f.source_file for f in result.failed_files] == ["s3://cur/p2.csv.gz"]
    assert [r[COLUMNS.index("line_key")] for r in stored(engine)] == ["a", "b"]
    with Session(engine) as session:
        failed = session.exec(select(BillingFile).where(BillingFile.error.is_not(None))).scalars().one()  # type: ignore[union-attr]
        assert failed.source_file == "s3://cur/p2.csv.gz" and "truncated" in (failed.error or "")
        (rejection,) = session.exec(select(Rejection)).scalars().all()
        assert (
            rejection.file == "s3://cur/p2.csv.gz" and rejection.reason == "truncated or corrupt gzip stream"
        )
        state = session.get(ConnectorState, "bills")
        assert (
            state is not None
            and state.watermark is None
            and "1 file(s) could not be read" in (state.last_error or "")
        )


def test_no_files_is_missing_data_and_keeps_the_watermark(engine: Engine) -> None:
    result, calls = ingest(engine, source())
    assert result.status == ConnectorStatus.MISSING_DATA and calls == []
    with Session(engine) as session:
        state = session.get(ConnectorState, "bills")
        assert state is not None and state.watermark is None


def test_lines_breaking_the_table_are_refused_not_fatal(engine: Engine) -> None:
    rows = [usage("ok"), usage("cur", currency="XYZ"), usage("big", billed_cost="1000000000000000"),
            usage("long", resource_id="i-" + "x" * 600), usage("nocat", charge_category=None)]  # fmt: skip
    result, _ = ingest(engine, source(batch("f.csv", rows)))
    # A resource id longer than its column is cut to fit and flagged (its cost lands), not refused.
    assert (result.accepted, result.refused) == (2, 3)
    flagged = [(f.rule, f.column, f.count) for f in result.finding_list]
    assert flagged == [("value_too_long", "resource_id", 1)]
    with Session(engine) as session:
        got = sorted((r.line, r.field) for r in session.exec(select(Rejection)).scalars())
    assert got == [(3, "currency"), (4, "billed_cost"), (6, "charge_category")]


def test_money_is_exact_to_the_nano_half_even(engine: Engine) -> None:
    # Text → Decimal(38, 9) rounds half-even at 1e-9 (Polars), and so does the Money column on bind.
    rows = [
        usage("a", effective_cost="1617.803491945205", billed_cost="0.0000000015", list_cost="0.0000000025"),
        # The largest amount both databases hold: 2^63 - 1 nanos (SQLite's integer).
        usage("b", effective_cost="-176.96", billed_cost="9223372036.854775807", list_cost=None),
    ]
    ingest(engine, source(batch("m.csv", rows)))
    with Session(engine) as session:
        got = {
            line.line_key: (line.effective_cost, line.billed_cost, line.list_cost)
            for line in session.exec(select(BillingLine)).scalars()
        }
    assert got == {
        "a": (Decimal("1617.803491945"), Decimal("0.000000002"), Decimal("0.000000002")),
        "b": (Decimal("-176.960000000"), Decimal("9223372036.854775807"), None),
    }


def test_cli_ingests_a_billing_connector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):
        if var.startswith("GPU_LEDGER_"):
            monkeypatch.delenv(var)
    monkeypatch.setattr(connectors.registry, "_default", fake_billing_registry())
    exports = tmp_path / "exports"
    exports.mkdir()
    header = (
        "line_key,provider,charge_start,charge_end,charge_category,instance_type,usage_quantity,usage_unit,"
    )
    header += "billed_cost,effective_cost,currency\n"
    (exports / "1.csv").write_text(
        header
        + "a,aws,2025-09-01T00:00:00Z,2025-09-02T00:00:00Z,Usage,p5.48xlarge,24,Hrs,1320.96,924.672,USD\n"
        + "b,aws,2025-09-01T00:00:00Z,2025-09-02T00:00:00Z,Usage,g9.xlarge,24,Hrs,10,10,USD\n"
        + "a,aws,2025-09-02T00:00:00Z,2025-09-03T00:00:00Z,Usage,p5.48xlarge,24,Hrs,1320.96,924.672,USD\n"
    )
    (exports / "2.unreadable").write_text("")
    db = tmp_path / "cli.db"
    config = tmp_path / "c.toml"
    config.write_text(f'database_url = "sqlite:///{db}"\n[[connectors]]\nname = "bills"\ntype = "fakebills"\n'
                      f'path = "{exports}"\nperiod = false\n')  # fmt: skip
    args = ["ingest", "bills", "--start", "2025-09-01T00:00:00Z", "--end", "2025-10-01T00:00:00Z"]
    result = CliRunner().invoke(app, [*args, "--config", str(config)])
    out = result.stdout
    assert result.exit_code == 1, (out, result.stderr)  # a file failed entirely
    assert "bills: status=PARSE_ERROR files=2 failed=1 read=3 accepted=2 refused=1 skipped=0" in out
    assert f"{exports / '1.csv'}: read=3 accepted=2 refused=1 skipped=0" in out
    assert f"FAILED {exports / '2.unreadable'}, line 1: truncated: no header" in out
    assert "refused rows: table rejection, run_id=1" in out
    assert "unknown GPU instance types (no GPU count, not priced; add [[instance_types]]): g9.xlarge" in out
    engine = make_engine(f"sqlite:///{db}")
    try:
        with Session(engine) as session:
            (line_a, line_b) = (
                session.exec(select(BillingLine).order_by(BillingLine.line_key)).scalars().all()
            )
        assert (line_a.gpu_hours, line_a.effective_cost, line_b.gpu_count) == (
            Decimal("192"),
            Decimal("924.672"),
            None,
        )
    finally:
        engine.dispose()
    # Once the bad file is gone the window is in, though 1 of 3 rows refused is DEGRADED: exit 3,
    # or 0 when allowed; the watermark moves.
    (exports / "2.unreadable").unlink()
    degraded = "status=DEGRADED files=1 failed=0 read=3 accepted=2 refused=1"
    result = CliRunner().invoke(app, [*args, "--config", str(config)])
    assert result.exit_code == 3 and degraded in result.stdout
    result = CliRunner().invoke(app, [*args, "--allow-degraded", "--config", str(config)])
    assert result.exit_code == 0 and degraded in result.stdout


# --- streaming: one transaction per period across its batches -------------------------------------

AUG = dt.datetime(2025, 8, 1, tzinfo=dt.UTC)


def part(n: int, keys: list[str], period: tuple[dt.datetime, dt.datetime] = (SEP, OCT)) -> BillingBatch:
    """Part ``n`` of a CUR split in parts: its lines charged on day ``n`` of the period's month."""
    day = period[0].replace(day=n)
    name = f"s3://cur/{period[0]:%Y-%m}/a1/part-{n}.csv"
    rows = [usage(k, charge_start=day, charge_end=day + dt.timedelta(days=1)) for k in keys]
    found = batch(name, rows, assembly_id="a1")
    found.period_start, found.period_end = period
    return found  # type: ignore[return-value]


def test_a_period_in_three_batches_replaces_exactly_and_keeps_every_line(engine: Engine) -> None:
    august = usage("aug", charge_start=AUG, charge_end=AUG + dt.timedelta(days=1))
    ingest(
        engine,
        source(
            batch("old.csv", [august], period=False), batch("s3://cur/old.csv", [usage("o1"), usage("o2")])
        ),
    )
    parts = (part(1, ["k1", "k2"]), part(2, ["k3"]), part(3, ["k4", "k5", "k6"]))
    result, calls = ingest(engine, source(*parts))
    assert (result.read, result.accepted, result.refused, result.lines_replaced) == (6, 6, 0, 2)
    assert [(f.source_file[-10:], f.accepted) for f in result.files] == [
        ("part-1.csv", 2), ("part-2.csv", 1), ("part-3.csv", 3)
    ]  # fmt: skip
    keys = [r[COLUMNS.index("line_key")] for r in stored(engine)]
    assert keys == ["aug", "k1", "k2", "k3", "k4", "k5", "k6"]
    assert calls == [[(SEP, OCT)]]
    first = stored(engine)
    # Again: the lines of parts 1-2, in the open transaction, are not taken for duplicates of part 3.
    result, _ = ingest(engine, source(part(1, ["k1", "k2"]), part(2, ["k3"]), part(3, ["k4", "k5", "k6"])))
    assert (result.accepted, result.refused, result.lines_replaced) == (6, 0, 6)
    assert stored(engine) == first
    with Session(engine) as session:
        names = sorted(f.source_file for f in session.exec(select(BillingFile)).scalars())
    assert names == ["old.csv", *(f"s3://cur/2025-09/a1/part-{n}.csv" for n in (1, 2, 3))]


def test_a_duplicate_across_two_batches_of_a_period_names_the_first(engine: Engine) -> None:
    result, _ = ingest(engine, source(part(1, ["a", "b"]), part(2, ["c", "b"])))
    assert (result.read, result.accepted, result.refused) == (4, 3, 1)
    assert [(f.accepted, f.refused) for f in result.files] == [(2, 0), (1, 1)]
    with Session(engine) as session:
        (rejection,) = session.exec(select(Rejection)).scalars().all()
    assert (rejection.file, rejection.line, rejection.field, rejection.reason) == (
        "s3://cur/2025-09/a1/part-2.csv",
        3,
        "line_key",
        "duplicated line item id 'b': first on line 3 of s3://cur/2025-09/a1/part-1.csv",
    )
    assert [r[COLUMNS.index("line_key")] for r in stored(engine)] == ["a", "b", "c"]


class _Failing:
    """A connector whose ``read`` raises after some batches (a lost connection mid-way)."""

    def __init__(self, *batches: BillingBatch) -> None:
        self.batches = batches

    def read(self, start: dt.datetime, end: dt.datetime) -> Iterator[BillingBatch]:
        yield from self.batches
        raise RetriableError("connection reset reading s3://cur/2025-09/a1/part-2.csv")


def test_a_connector_error_rolls_the_open_period_back_and_keeps_the_complete_one(engine: Engine) -> None:
    ingest(engine, source(part(1, ["old1"]), part(2, ["old2"])))
    before = stored(engine)
    failing = _Failing(part(1, ["aug1", "aug2"], (AUG, SEP)), part(1, ["new1"]))
    with pytest.raises(RetriableError):
        ingest_billing(engine, "bills", failing, SEP, OCT, clock=lambda: NOW, after_import=lambda e, p: None)
    # August (complete before the error) is stored; September is untouched: no half-replaced period.
    keys = [r[COLUMNS.index("line_key")] for r in stored(engine)]
    assert keys == ["aug1", "aug2", "old1", "old2"]
    assert [r for r in stored(engine) if r[COLUMNS.index("line_key")].startswith("old")] == before
    with Session(engine) as session:
        files = sorted((f.source_file, f.rows_accepted) for f in session.exec(select(BillingFile)).scalars())
        run = session.exec(select(ConnectorRun).order_by(ConnectorRun.id.desc())).scalars().first()  # type: ignore[union-attr]
    assert files == [
        ("s3://cur/2025-08/a1/part-1.csv", 2),
        ("s3://cur/2025-09/a1/part-1.csv", 1),
        ("s3://cur/2025-09/a1/part-2.csv", 1),
    ]
    assert run is not None and (run.status, run.accepted, run.ledger_rows) == ("FAILED_CONNECTION", 2, 2)
    # The engine is usable afterwards (the open transaction did not leak a lock).
    result, _ = ingest(engine, source(part(1, ["new1"])))
    assert [r[COLUMNS.index("line_key")] for r in stored(engine)] == ["aug1", "aug2", "new1"]
    assert result.lines_replaced == 2


def test_a_file_failing_after_some_of_its_batches_leaves_its_period_as_it_was(engine: Engine) -> None:
    ingest(engine, source(part(1, ["old1"])))
    before = stored(engine)
    # Part 1 gives a batch, then turns out unreadable further on (a corrupt page mid-file).
    broken = BillingFileError("s3://cur/2025-09/a1/part-1.csv", "corrupt page", line=40)
    result, _ = ingest(engine, source(part(1, ["new1"]), broken))
    assert stored(engine) == before  # not replaced by part of the file
    assert [f.error is not None for f in result.files] == [True]
    assert result.status == ConnectorStatus.PARSE_ERROR
