"""Honest run status: a billing run that imported but refused too much is DEGRADED, with its reason,
its watermark moved, and the scheduler treating it as a run done (no early retry)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterator
from decimal import Decimal

import pytest
from billing_fakes import OCT, SEP, FakeBillingConfig, FakeBillingSource, batch, usage
from sqlalchemy import Engine

from connectors.base import ConnectorStatus
from connectors.billing import BillingBatch, BillingFileError, RefusedRow
from service.billing.health import Outcome, QualityLimits, degraded_reason
from service.billing.ingest import BillingImportResult, ingest_billing
from service.db import make_engine, session_scope
from service.models import ConnectorRun, ConnectorState
from service.scheduler import Scheduler
from service.telemetry import Telemetry

NOW = dt.datetime(2025, 10, 3, tzinfo=dt.UTC)
TAIL = " (what was accepted is imported; see the rejections)"


@pytest.fixture
def lite(sqlite_url: str) -> Iterator[Engine]:
    engine = make_engine(sqlite_url)
    yield engine
    engine.dispose()


def source(*items: BillingBatch | BillingFileError, **config: float) -> FakeBillingSource:
    cfg = FakeBillingConfig(name="bills", type="fakebills", **config)
    return FakeBillingSource(cfg, batches=list(items))


def ingest(engine: Engine, src: FakeBillingSource, **kw: object) -> BillingImportResult:
    return ingest_billing(
        engine, "bills", src, SEP, OCT, clock=lambda: NOW, after_import=lambda e, p: None, **kw  # type: ignore[arg-type]
    )  # fmt: skip


def refused(file: str, n: int, cost: str | None = None, first_line: int = 900) -> list[RefusedRow]:
    amount = None if cost is None else Decimal(cost)
    return [RefusedRow(file, first_line + i, "BilledCost", "not a number", None, amount) for i in range(n)]


def accepted(file: str, n: int, **kw: object) -> list[dict[str, object]]:
    return [usage(f"{file}-{i}", **kw) for i in range(n)]


def state(engine: Engine) -> tuple[str, dt.datetime | None, str | None]:
    with session_scope(engine) as session:
        s = session.get(ConnectorState, "bills")
        assert s is not None
        return s.status, s.watermark, s.last_error


# --- the judgement alone ----------------------------------------------------------------------------


def test_degraded_reason_names_each_share_and_file_exactly() -> None:
    limits = QualityLimits()
    assert (
        degraded_reason(Outcome(100, 1, Decimal(5), Decimal(995)), limits) is None
    )  # 1 %, 0.5 %: at, not above
    reason = degraded_reason(Outcome(3, 2, Decimal("7.5"), Decimal("22.5"), ["b.csv"]), limits)
    assert reason == (
        "refused 2 of 3 rows read (66.67 % > max_refused_rows_pct 1 %); refused rows cost 7.5 of 30 "
        "(25 % > max_refused_cost_pct 0.5 %); no row accepted from 1 file(s) that had rows: b.csv" + TAIL
    )
    files = [f"{c}.csv" for c in "abcd"]
    assert degraded_reason(Outcome(4, 0, Decimal(0), Decimal(0), files), limits) == (
        "no row accepted from 4 file(s) that had rows: a.csv, b.csv, c.csv, …" + TAIL
    )
    assert degraded_reason(Outcome(0, 0, Decimal(0), Decimal(0)), limits) is None  # nothing read
    strict = QualityLimits(Decimal(0), Decimal(0))
    assert degraded_reason(Outcome(1000, 1, Decimal(0), Decimal(10)), strict) == (
        "refused 1 of 1000 rows read (0.1 % > max_refused_rows_pct 0 %)" + TAIL
    )


def test_limits_come_from_the_connector_config() -> None:
    cfg = FakeBillingConfig(name="b", type="fakebills", max_refused_rows_pct=2.5, max_refused_cost_pct=0.1)
    assert QualityLimits.of(cfg) == QualityLimits(Decimal("2.5"), Decimal("0.1"))
    assert QualityLimits.of(None) == QualityLimits(Decimal("1.0"), Decimal("0.5"))
    with pytest.raises(ValueError, match="max_refused_rows_pct"):
        FakeBillingConfig(name="b", type="fakebills", max_refused_rows_pct=101)


# --- through ingest_billing -------------------------------------------------------------------------


def test_refused_rows_above_one_percent_degrade_the_run_and_the_watermark_still_moves(lite: Engine) -> None:
    at_limit = ingest(lite, source(batch("a.csv", accepted("a", 99), refused=refused("a.csv", 1))))
    assert (at_limit.status, at_limit.error) == (ConnectorStatus.OK, None)  # 1 of 100: not above 1 %

    result = ingest(lite, source(batch("a.csv", accepted("a", 98), refused=refused("a.csv", 2))))
    reason = "refused 2 of 100 rows read (2 % > max_refused_rows_pct 1 %)" + TAIL
    assert (result.status, result.error, result.accepted) == (ConnectorStatus.DEGRADED, reason, 98)
    assert state(lite) == ("DEGRADED", OCT, reason)
    with session_scope(lite) as session:
        run = session.get(ConnectorRun, result.run_id)
        assert run is not None and (run.status, run.error, run.accepted, run.rejected) == (
            "DEGRADED", reason, 98, 2,
        )  # fmt: skip


def test_refused_cost_is_a_share_of_magnitudes_so_a_credit_does_not_hide_it(lite: Engine) -> None:
    # 199 accepted lines: 198 of 10 and a credit of −10 → |billed| 1990 (signed: 1970).
    lines = [
        *accepted("a", 198, billed_cost="10"),
        usage("credit", billed_cost="-10", charge_category="Credit"),
    ]

    def run(cost: str) -> BillingImportResult:
        return ingest(lite, source(batch("a.csv", lines, refused=refused("a.csv", 1, cost))))

    # 10 of 2000 = 0.5 %: at the limit (signed sums would say 10 of 1980 = 0.505 %: above).
    at_limit = run("10")
    assert (at_limit.status, at_limit.refused_cost, at_limit.files[0].refused_cost) == (
        ConnectorStatus.OK, Decimal(10), Decimal(10),
    )  # fmt: skip
    above = run("10.000000001")
    assert above.status == ConnectorStatus.DEGRADED
    assert above.error == (
        "refused rows cost 10.000000001 of 2000.000000001 (0.5 % > max_refused_cost_pct 0.5 %)" + TAIL
    )
    negative = run("-10.01")  # a refused credit is lost money too
    assert (negative.status, negative.refused_cost) == (ConnectorStatus.DEGRADED, Decimal("-10.01"))
    # A refused row whose cost could not be read counts in the rows' share only.
    unreadable = ingest(lite, source(batch("a.csv", lines, refused=refused("a.csv", 1))))
    assert (unreadable.status, unreadable.refused_cost) == (ConnectorStatus.OK, Decimal(0))


def test_a_file_with_rows_and_none_accepted_degrades_whatever_the_thresholds(lite: Engine) -> None:
    off = {"max_refused_rows_pct": 100.0, "max_refused_cost_pct": 100.0}
    files = [
        batch("a.csv", accepted("a", 1)),
        batch("b.csv", [], refused=refused("b.csv", 2), skipped=1),  # 2 rows to import, none accepted
        batch("c.csv", [], skipped=2),  # only rows a documented rule skips: nothing lost
        batch("d.csv", []),  # no rows at all
    ]
    result = ingest(lite, source(*files, **off))
    assert (result.status, result.error) == (
        ConnectorStatus.DEGRADED,
        "no row accepted from 1 file(s) that had rows: b.csv" + TAIL,
    )
    assert state(lite)[:2] == ("DEGRADED", OCT)
    # Off, the shares alone never degrade a run.
    assert ingest(
        lite, source(batch("a.csv", accepted("a", 1), refused=refused("a.csv", 9, "5")), **off)
    ).status == (ConnectorStatus.OK)


def test_the_config_and_the_limits_argument_set_the_thresholds(lite: Engine) -> None:
    one_of_three = batch("a.csv", accepted("a", 2), refused=refused("a.csv", 1))
    assert ingest(lite, source(one_of_three, max_refused_rows_pct=50.0)).status == ConnectorStatus.OK
    assert ingest(lite, source(one_of_three, max_refused_rows_pct=30.0)).status == ConnectorStatus.DEGRADED
    loose = QualityLimits(Decimal(50), Decimal(50))
    assert ingest(lite, source(one_of_three), limits=loose).status == ConnectorStatus.OK


def test_a_failed_file_keeps_parse_error_and_the_watermark(lite: Engine) -> None:
    files: list[BillingBatch | BillingFileError] = [
        BillingFileError("x.csv", "truncated gzip"),
        batch("b.csv", [], refused=refused("b.csv", 3, "1")),
    ]
    result = ingest(lite, source(*files))
    assert result.status == ConnectorStatus.PARSE_ERROR
    assert result.error == "1 file(s) could not be read: x.csv: truncated gzip"
    assert state(lite) == ("PARSE_ERROR", None, result.error)


def test_the_ingestors_own_refusals_carry_their_cost_but_a_duplicate_does_not(lite: Engine) -> None:
    rows = [
        *accepted("a", 3, billed_cost="100"),
        usage("bad-currency", currency="XYZ", billed_cost="7.25"),
        usage("a-0", billed_cost="100"),  # the key of the first line again: that cost is booked once
    ]
    result = ingest(lite, source(batch("a.csv", rows)))
    assert (result.accepted, result.refused, result.refused_cost) == (3, 2, Decimal("7.25"))
    # 2 of 5 rows, 7.25 of 307.25: both above.
    assert result.status == ConnectorStatus.DEGRADED
    assert result.error is not None and "refused rows cost 7.25 of 307.25 (2.36 %" in result.error


def test_the_scheduler_counts_a_degraded_run_and_waits_for_the_regular_interval(lite: Engine) -> None:
    src = source(batch("a.csv", accepted("a", 1), refused=refused("a.csv", 1)))
    telemetry = Telemetry()
    sched = Scheduler(lite, [src.config], connectors={"bills": src}, telemetry=telemetry, clock=lambda: NOW)
    outcome = asyncio.run(sched.run_once(src.config, src))
    assert outcome == "ok"  # not "retry": the next run comes at interval_s
    labels = {"connector": "bills", "status": "DEGRADED"}
    assert telemetry.registry.get_sample_value("gpu_ledger_ingest_runs_total", labels) == 1
    assert state(lite)[0] == "DEGRADED"
