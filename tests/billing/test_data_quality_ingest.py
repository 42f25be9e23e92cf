"""Data-quality findings through ``ingest_billing``: stored per file with its lines, replaced (never
added to) when the file comes again, counted per file and per run; kept when an import is rolled
back. Hand-built batches (``billing_fakes``); the storage test runs on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Sequence

import pytest
from billing_fakes import OCT, SEP, FakeBillingConfig, FakeBillingSource, batch, usage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select, text

from connectors.base import ConnectorStatus, RetriableError
from connectors.billing import BillingBatch, BillingFileError
from connectors.sdk.billing import Finding
from service.billing.ingest import BillingImportResult, ingest_billing
from service.db import make_engine
from service.dbtypes import table_of
from service.models import ConnectorRun, DataQualityFinding

NOW = dt.datetime(2025, 10, 3, tzinfo=dt.UTC)
AUG = dt.datetime(2025, 8, 1, tzinfo=dt.UTC)
FREQ = "not one of One-Time, Recurring, Usage-Based"


def source(*items: BillingBatch | BillingFileError, **config: float) -> FakeBillingSource:
    cfg = FakeBillingConfig(name="bills", type="fakebills", **config)
    return FakeBillingSource(cfg, batches=list(items))


def ingest(
    engine: Engine, src: FakeBillingSource, start: dt.datetime = SEP, end: dt.datetime = OCT
) -> BillingImportResult:
    return ingest_billing(
        engine,
        "bills",
        src,
        start,
        end,
        clock=lambda: NOW,
        after_import=lambda engine, periods: None,
    )


def with_findings(found: BillingBatch, *findings: Finding) -> BillingBatch:
    found.findings = list(findings)
    return found


def freq(file: str, count: int, *lines: int, provider: str | None = None) -> Finding:
    examples = tuple((n, "Usage-based") for n in lines)
    return Finding(file, "unknown_value", "ChargeFrequency", FREQ, count, examples, provider)


def neg(file: str, count: int, *lines: int) -> Finding:
    examples = tuple((n, "-1") for n in lines)
    return Finding(file, "negative_usage", "ConsumedQuantity", "negative on a Usage row", count, examples)


def stored(engine: Engine) -> list[tuple[object, ...]]:
    """Every finding row but its id, run and time of recording, in a stable order."""
    t = table_of(DataQualityFinding)
    columns = ["connector", "source_file", "provider", "rule", "column_name", "reason", "count", "examples",
               "period_start", "period_end"]  # fmt: skip
    with engine.connect() as conn:
        rows = conn.execute(select(*[t.c[c] for c in columns]).order_by(t.c.source_file, t.c.rule)).all()
    return [tuple(r) for r in rows]


def run_ids(engine: Engine) -> set[int]:
    with engine.connect() as conn:
        return {r[0] for r in conn.execute(text("SELECT run_id FROM data_quality_finding"))}


def _examples(*pairs: tuple[int, str]) -> str:
    return json.dumps([{"line": n, "value": v} for n, v in pairs])


def two_files() -> list[BillingBatch]:
    """a.csv in two batches (one finding met in both: merged), b.csv with another rule."""
    a1 = with_findings(batch("a.csv", [usage("a1"), usage("a2")]), freq("a.csv", 2, 2, 3))
    a2 = with_findings(batch("a.csv", [usage("a3")]), freq("a.csv", 4, 9, 10, 11, 12), neg("a.csv", 1, 9))
    b = with_findings(batch("b.csv", [usage("b1")]), neg("b.csv", 3, 2, 3, 4))
    return [a1, a2, b]


def test_findings_are_stored_per_file_counted_and_replaced_on_reimport(engine: Engine) -> None:
    result = ingest(engine, source(*two_files()))
    assert result.status == ConnectorStatus.OK
    assert (result.findings, [(f.source_file, f.findings) for f in result.files]) == (
        10,
        [("a.csv", 7), ("b.csv", 3)],
    )
    # Merged per (file, rule, column, reason, provider): counts add, the first 5 examples kept; a
    # finding that names no provider takes the file's (its lines are all aws).
    expected = [
        ("bills", "a.csv", "aws", "negative_usage", "ConsumedQuantity", "negative on a Usage row", 1,
         _examples((9, "-1")), SEP, OCT),
        ("bills", "a.csv", "aws", "unknown_value", "ChargeFrequency", FREQ, 6,
         _examples((2, "Usage-based"), (3, "Usage-based"), (9, "Usage-based"), (10, "Usage-based"),
                   (11, "Usage-based")), SEP, OCT),
        ("bills", "b.csv", "aws", "negative_usage", "ConsumedQuantity", "negative on a Usage row", 3,
         _examples((2, "-1"), (3, "-1"), (4, "-1")), SEP, OCT),
    ]  # fmt: skip
    assert [tuple(json.loads(str(v)) if i == 7 else v for i, v in enumerate(r)) for r in stored(engine)] == [
        tuple(json.loads(str(v)) if i == 7 else v for i, v in enumerate(r)) for r in expected
    ]
    assert run_ids(engine) == {result.run_id}
    with engine.connect() as conn:
        assert conn.execute(select(table_of(ConnectorRun).c.findings)).scalar_one() == 10

    # The same files again: the same findings, recorded by the new run — not twice.
    again = ingest(engine, source(*two_files()))
    assert again.findings == 10 and len(stored(engine)) == 3
    assert [r[:7] for r in stored(engine)] == [r[:7] for r in expected]
    assert run_ids(engine) == {again.run_id}

    # a.csv fixed, alone: its billing period is replaced, b.csv's lines with it (BillingBatch's
    # rule), and so are b.csv's findings — they follow the lines.
    fixed = ingest(engine, source(batch("a.csv", [usage("a1"), usage("a2"), usage("a3")])))
    assert fixed.findings == 0 and stored(engine) == []
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM billing_line")).scalar_one() == 3


def sqlite_engine(url: str) -> Iterator[Engine]:
    engine = make_engine(url)
    yield engine
    engine.dispose()


@pytest.fixture
def lite(sqlite_url: str) -> Iterator[Engine]:
    yield from sqlite_engine(sqlite_url)


def test_a_file_without_period_gets_the_run_window_and_keeps_a_finding_provider(lite: Engine) -> None:
    found = with_findings(
        batch("daily.csv", [usage("d1"), usage("d2", provider="gcp")], period=False),
        freq("daily.csv", 1, 2, provider="oracle"),
        neg("daily.csv", 2, 2, 3),
    )
    start, end = dt.datetime(2025, 9, 5, tzinfo=dt.UTC), dt.datetime(2025, 9, 6, tzinfo=dt.UTC)
    ingest(lite, source(found), start, end)
    # The lines have two providers: a finding naming none stays without one.
    assert [(r[2], r[3], r[8], r[9]) for r in stored(lite)] == [
        (None, "negative_usage", start, end),
        ("oracle", "unknown_value", start, end),
    ]
    # Files without a period are replaced by file: another file's import leaves these alone; the
    # same file, clean, takes its findings away.
    other = with_findings(batch("other.csv", [usage("o1")], period=False), neg("other.csv", 4, 2))
    ingest(lite, source(other), start, end)
    assert [(r[1], r[3], r[6]) for r in stored(lite)] == [
        ("daily.csv", "negative_usage", 2),
        ("daily.csv", "unknown_value", 1),
        ("other.csv", "negative_usage", 4),
    ]
    ingest(lite, source(batch("daily.csv", [usage("d1")], period=False)), start, end)
    assert [(r[1], r[3], r[6]) for r in stored(lite)] == [("other.csv", "negative_usage", 4)]


def test_a_newer_assembly_of_a_period_replaces_the_findings_of_the_old_ones_files(lite: Engine) -> None:
    old = with_findings(
        batch("s3://cur/2025-09/a1/part-1.csv", [usage("k1")]), neg("s3://cur/2025-09/a1/part-1.csv", 1, 2)
    )
    ingest(lite, source(old))
    new = with_findings(
        batch("s3://cur/2025-09/a2/part-1.csv", [usage("k1")]), freq("s3://cur/2025-09/a2/part-1.csv", 1, 2)
    )
    ingest(lite, source(new))
    assert [(r[1], r[3]) for r in stored(lite)] == [("s3://cur/2025-09/a2/part-1.csv", "unknown_value")]


def test_an_import_rolled_back_keeps_the_findings_it_would_have_replaced(lite: Engine) -> None:
    ingest(lite, source(with_findings(batch("a.csv", [usage("a1")]), neg("a.csv", 1, 2))))
    before = stored(lite)

    def failing() -> Iterator[BillingBatch]:
        yield with_findings(batch("a.csv", [usage("a1")]), freq("a.csv", 7, 2))
        raise RetriableError("HTTP 503 while reading part 2")

    src = source()
    src.read = lambda start, end: failing()  # type: ignore[method-assign]
    with pytest.raises(RetriableError):
        ingest(lite, src)
    assert stored(lite) == before


def test_a_file_that_fails_keeps_its_earlier_findings_and_counts_none(lite: Engine) -> None:
    ingest(lite, source(with_findings(batch("a.csv", [usage("a1")]), neg("a.csv", 1, 2))))
    result = ingest(lite, source(BillingFileError("a.csv", "truncated gzip")))
    assert result.status == ConnectorStatus.PARSE_ERROR and result.findings == 0
    assert [(r[1], r[3]) for r in stored(lite)] == [("a.csv", "negative_usage")]


# --- a property: whatever the split into batches, stored = merged, and a re-import changes nothing ---

_rules = st.sampled_from([("unknown_value", "ChargeFrequency"), ("negative_usage", "ConsumedQuantity")])
_finding = st.builds(
    lambda file, rule, count, line: Finding(file, rule[0], rule[1], "r", count, ((line, "v"),)),
    st.sampled_from(["a.csv", "b.csv"]),
    _rules,
    st.integers(1, 1000),
    st.integers(2, 50),
)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(per_batch=st.lists(st.lists(_finding, max_size=4), min_size=1, max_size=4))
def test_stored_counts_are_the_sums_of_the_batches_and_reimport_is_a_no_op(
    lite: Engine, per_batch: Sequence[Sequence[Finding]]
) -> None:
    with lite.begin() as conn:
        conn.execute(text("DELETE FROM data_quality_finding"))

    def batches() -> list[BillingBatch]:
        out = []
        for i, found in enumerate(per_batch):
            for file in ("a.csv", "b.csv"):
                mine = [f for f in found if f.file == file]
                out.append(with_findings(batch(file, [usage(f"{file}-{i}")]), *mine))
        return out

    expected: dict[tuple[str, str], int] = {}
    for found in per_batch:
        for f in found:
            expected[(f.file, f.rule)] = expected.get((f.file, f.rule), 0) + f.count
    first = ingest(lite, source(*batches()))
    assert first.findings == sum(expected.values())
    assert {(str(r[1]), str(r[3])): r[6] for r in stored(lite)} == expected
    snapshot = stored(lite)
    ingest(lite, source(*batches()))
    assert stored(lite) == snapshot


def test_text_too_long_is_cut_and_flagged_but_an_over_long_line_key_is_refused(lite: Engine) -> None:
    name, description = "n" * 301, "d" * 1000
    rows = [
        usage("k1", resource_name=name, sku_description=description),
        usage("k2", resource_name="r" * 300),  # exactly the column's length: kept whole
        usage("k" * 201),
    ]
    result = ingest(lite, source(batch("a.csv", rows)))
    assert (result.accepted, result.refused, result.findings) == (2, 1, 2)
    with lite.connect() as conn:
        kept = conn.execute(
            text("SELECT line_key, resource_name, sku_description FROM billing_line ORDER BY 1")
        )
        assert [tuple(r) for r in kept] == [("k1", "n" * 300, "d" * 500), ("k2", "r" * 300, None)]
        refused = conn.execute(text("SELECT line, field, reason FROM rejection")).one()
    assert tuple(refused) == (4, "line_key", f"longer than 200 characters: {'k' * 201!r}")
    assert [(r[3], r[4], r[5], r[6], json.loads(str(r[7]))) for r in stored(lite)] == [
        ("value_too_long", "resource_name", "longer than the 300 characters stored: cut to 300", 1,
         [{"line": 2, "value": "n" * 120 + "…"}]),
        ("value_too_long", "sku_description", "longer than the 500 characters stored: cut to 500", 1,
         [{"line": 2, "value": "d" * 120 + "…"}]),
    ]  # fmt: skip
