"""One failure, one status: the metrics and billing ingestors (the run row, connector_state), the
scheduler (its next step) and `gpu-ledger ingest` (exit code, one line) classify a run's exception
alike (service.failures); a bug is INTERNAL_ERROR with its traceback logged, never retried as a
connection failure; ``read == accepted + rejected`` on every outcome."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import traceback
from pathlib import Path

import httpx
import pydantic
import pytest
import sqlalchemy.exc
from failing_sources import (
    AUG,
    DAY0,
    FAILURES,
    FailingBilling,
    FailingBillingConfig,
    FailingConfig,
    FailingMetrics,
    failing_registry,
)
from sqlalchemy import Engine, select
from sqlmodel import Session
from typer.testing import CliRunner

import connectors.registry
from connectors.sdk import ConnectorStatus
from service.billing.ingest import ingest_billing
from service.cli import app
from service.db import make_engine
from service.failures import classify
from service.ledger.ingest import ingest_window
from service.models import ConnectorRun, ConnectorState
from service.run_recorder import RunRecorder
from service.scheduler import Scheduler

S = ConnectorStatus
#: kind → (status, the scheduler's next step, the one-line message every runner records)
EXPECTED = {
    "configuration": (
        S.INVALID_CONFIGURATION,
        "stop",
        "ConfigurationError: project 'gpu-prod' has no billing export table",
    ),
    "unreachable": (S.FAILED_CONNECTION, "retry", "RetriableError: HTTP 503 from the source"),
    "refused-socket": (
        S.FAILED_CONNECTION,
        "retry",
        "ConnectionRefusedError: [Errno 111] Connection refused",
    ),
    "access-denied": (S.FAILED_CONNECTION, "stop", "FatalSourceError: HTTP 403: AccessDenied"),
    "bad-data": (S.PARSE_ERROR, "wait", "ConnectorError: series 'DCGM_FI_DEV_POWER_USAGE' has no values"),
    "not-json": (S.PARSE_ERROR, "wait", "JSONDecodeError: Expecting value: line 1 column 1 (char 0)"),
    "bug": (S.INTERNAL_ERROR, "wait", "KeyError: 'gpu_uuid'"),
}
#: What each source read before failing: metrics day one (62 samples: 60 good, 2 refused);
#: billing August's file (3 rows: 2 lines, 1 refused) — September's, open when it failed, is
#: rolled back and not counted.
COUNTS = {"metrics": (62, 60, 2), "billing": (3, 2, 1)}
NOW = DAY0 + dt.timedelta(hours=36)


def _source(source: str, kind: str) -> FailingMetrics | FailingBilling:
    if source == "metrics":
        return FailingMetrics(FailingConfig(name="src", type="failing_metrics", failure=kind))
    return FailingBilling(FailingBillingConfig(name="src", type="failing_billing", failure=kind))


def _ingest(engine: Engine, connector: FailingMetrics | FailingBilling) -> None:
    if isinstance(connector, FailingMetrics):
        ingest_window(engine, "src", connector, DAY0, DAY0 + dt.timedelta(days=2), clock=lambda: NOW)
    else:
        ingest_billing(engine, "src", connector, AUG, NOW, clock=lambda: NOW, after_import=lambda e, p: None)


def _recorded(engine: Engine) -> tuple[ConnectorState, ConnectorRun]:
    with Session(engine) as session:
        state = session.get(ConnectorState, "src")
        run = session.exec(select(ConnectorRun).order_by(ConnectorRun.id.desc())).scalars().first()  # type: ignore[union-attr]
        assert state is not None and run is not None
        return state, run


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info is not None]


@pytest.mark.parametrize("source", ["metrics", "billing"])
@pytest.mark.parametrize("kind", list(EXPECTED))
def test_each_ingestor_records_a_failure_with_its_one_status(
    engine: Engine, source: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    status, _, message = EXPECTED[kind]
    with pytest.raises(type(FAILURES[kind]())):
        _ingest(engine, _source(source, kind))
    state, run = _recorded(engine)
    assert (state.status, state.last_error, state.watermark, state.last_success_at) == (
        status,
        message,
        None,
        None,
    )
    assert (run.status, run.error) == (status, message)
    assert (run.read, run.accepted, run.rejected) == COUNTS[source]
    assert run.read == run.accepted + run.rejected
    tracebacks = _tracebacks(caplog)
    if kind == "bug":
        # Logged once, where it happened, with the traceback reaching into the connector.
        assert len(tracebacks) == 1 and tracebacks[0].exc_info is not None
        assert tracebacks[0].exc_info[0] is KeyError
        assert "failed with a bug (INTERNAL_ERROR): KeyError: 'gpu_uuid'" in tracebacks[0].getMessage()
        frames = traceback.extract_tb(tracebacks[0].exc_info[2])
        assert frames[-1].filename.endswith("failing_sources.py")
        assert frames[-1].name == ("collect" if source == "metrics" else "read")
    else:
        assert tracebacks == []


@pytest.mark.parametrize("source", ["metrics", "billing"])
@pytest.mark.parametrize("kind", list(EXPECTED))
def test_the_scheduler_takes_the_same_status_and_retries_only_a_source_out_of_reach(
    engine: Engine, source: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    status, next_step, message = EXPECTED[kind]
    connector = _source(source, kind)
    config = FailingConfig(name="src", type=f"failing_{source}", failure=kind, backfill_days=1.5)
    sched = Scheduler(engine, [config], connectors={"src": connector}, clock=lambda: NOW)
    outcome = asyncio.run(sched.run_once(config, connector))
    assert outcome == next_step
    assert sched.stopped == ({"src": status} if next_step == "stop" else {})
    state, run = _recorded(engine)
    assert (state.status, state.last_error) == (status, message)
    assert (run.status, run.error) == (status, message)
    assert run.read == run.accepted + run.rejected == COUNTS[source][0]
    # A bug's traceback is logged once (by the run recorder), not again by the scheduler.
    assert [r.exc_info[0] for r in _tracebacks(caplog) if r.exc_info] == ([KeyError] if kind == "bug" else [])


@pytest.mark.parametrize("source", ["metrics", "billing"])
@pytest.mark.parametrize("kind", list(EXPECTED))
def test_the_cli_exits_1_with_one_line_naming_the_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, kind: str
) -> None:
    for var in list(os.environ):
        if var.startswith("GPU_LEDGER_"):
            monkeypatch.delenv(var)
    monkeypatch.setattr(connectors.registry, "_default", failing_registry())
    db = tmp_path / "cli.db"
    config = tmp_path / "c.toml"
    config.write_text(
        f'database_url = "sqlite:///{db}"\n[[connectors]]\nname = "src"\ntype = "failing_{source}"\n'
        f'failure = "{kind}"\n'
    )
    start, end = (DAY0, DAY0 + dt.timedelta(days=2)) if source == "metrics" else (AUG, NOW)
    args = ["ingest", "src", "--start", start.isoformat(), "--end", end.isoformat(), "--config", str(config)]
    result = CliRunner().invoke(app, args)
    status, _, message = EXPECTED[kind]
    line = f"gpu-ledger: error: src: {status}: {message}"
    if kind == "bug":
        line += " (a bug: the traceback is in the log above)"
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[-1] == line, result.stderr
    assert "Traceback" not in result.stdout
    engine = make_engine(f"sqlite:///{db}")
    try:
        state, run = _recorded(engine)
    finally:
        engine.dispose()
    assert (state.status, run.status, run.error) == (status, status, message)
    assert (run.read, run.accepted, run.rejected) == COUNTS[source]


def test_read_is_accepted_plus_rejected_on_success_and_on_an_empty_window(engine: Engine) -> None:
    with RunRecorder(engine, "src", "T", DAY0, NOW, lambda: NOW) as run:
        run.counts.add(accepted=5, rejected=2, ledger_rows=3)
        run.counts.add(accepted=1)
        run.finish(S.OK, watermark=NOW)
    _, row = _recorded(engine)
    assert (row.status, row.read, row.accepted, row.rejected, row.ledger_rows) == ("OK", 8, 6, 2, 3)
    with RunRecorder(engine, "src", "T", DAY0, NOW, lambda: NOW) as run:
        run.finish(S.MISSING_DATA)
    _, row = _recorded(engine)
    assert (row.status, row.read, row.accepted, row.rejected) == ("MISSING_DATA", 0, 0, 0)
    with pytest.raises(RuntimeError, match="has already ended"):
        run.finish(S.OK)


def test_an_error_after_the_run_ended_does_not_rewrite_it(engine: Engine) -> None:
    with pytest.raises(ZeroDivisionError), RunRecorder(engine, "src", "T", DAY0, NOW, lambda: NOW) as run:
        run.finish(S.OK, watermark=NOW)
        _ = 1 / 0
    state, row = _recorded(engine)
    assert (state.status, row.status, row.error) == ("OK", "OK", None)


def _validation_error() -> pydantic.ValidationError:
    class Reading(pydantic.BaseModel):
        power_w: float

    try:
        Reading.model_validate({"power_w": "n/a"})
    except pydantic.ValidationError as error:
        return error
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    ("error", "status", "next_step"),
    [
        (httpx.ConnectTimeout("timed out"), S.FAILED_CONNECTION, "retry"),
        (TimeoutError("read timed out"), S.FAILED_CONNECTION, "retry"),
        (sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("closed")), S.FAILED_CONNECTION, "retry"),
        (_validation_error(), S.PARSE_ERROR, "wait"),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), S.PARSE_ERROR, "wait"),
        # Not connection trouble: a local file missing, a wrong value — bugs until a connector
        # says otherwise (by raising ConfigurationError or ConnectorError).
        (FileNotFoundError(2, "No such file or directory"), S.INTERNAL_ERROR, "wait"),
        (ValueError("could not convert string to float: 'n/a'"), S.INTERNAL_ERROR, "wait"),
    ],
)  # fmt: skip
def test_unwrapped_library_errors(error: Exception, status: S, next_step: str) -> None:
    failure = classify(error)
    assert (failure.status, failure.next_step, failure.bug) == (status, next_step, status == S.INTERNAL_ERROR)
    assert failure.message.startswith(f"{type(error).__name__}: ") and "\n" not in failure.message
