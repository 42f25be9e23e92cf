"""Delivery failures are recorded, never raised into the ingest, never logged with the URL; a
channel that is down is not retried within one evaluation but at later ones, after its back-off;
evaluators of several threads (or processes) take turns, so one alert is announced once."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from alerts.helpers import at_once, silent
from ledger_rows import at
from notify.smtpserver import free_port, smtp_server
from receiver import http_receiver
from sqlalchemy import Engine, func, select

from service.alerts.engine import AlertConfig, AlertEngine
from service.alerts.rules import parse_alert_tables
from service.db import make_engine
from service.models import AlertEvent
from service.notify.email import SmtpSettings

Put = Callable[[Iterable[Any]], None]
SECRET = "/hook/t0p-s3cret"


def _events(engine: Engine) -> list[tuple[str, str, str]]:
    with engine.connect() as conn:
        stmt = select(AlertEvent.subject, AlertEvent.state, AlertEvent.deliveries).order_by(AlertEvent.id)
        return [tuple(r) for r in conn.execute(stmt)]  # type: ignore[misc]


def test_a_dead_webhook_is_recorded_and_skipped_mail_still_goes_then_retried(
    engine: Engine, put: Put, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    silent(put, "dc1", "dc2")
    with http_receiver() as hooks, smtp_server(tmp_path) as mail:
        dead = f"http://127.0.0.1:{free_port()}{SECRET}"  # nothing listens there
        hooks.script = [500] * 2
        rules, channels = parse_alert_tables(
            "test",
            [
                {
                    "name": "silent",
                    "kind": "connector_silent",
                    "hours": 1,
                    "channels": ["dead", "flaky", "mail"],
                }
            ],
            [
                {"name": "dead", "type": "webhook", "url": dead, "retries": 0},
                {"name": "flaky", "type": "slack", "url": hooks.base + SECRET, "retries": 1, "timeout_s": 2},
                {"name": "mail", "type": "email", "to": ["ops@example.com"]},
            ],
            has_smtp=True,
        )
        smtp = SmtpSettings(host=mail.host, port=mail.port, starttls=False, from_addr="ledger@example.com")
        alerts = AlertEngine(engine, AlertConfig(tuple(rules), tuple(channels), smtp))
        alerts.after_run(at(2))  # must not raise
        assert hooks.attempts == 2  # flaky: first announcement only (1 + 1 retry), then skipped
        assert len(mail.received) == 2
        refused = "ConnectError (after 1 attempt(s))"
        flaky = f"webhook {hooks.base}/…: HTTP 500 (after 2 attempt(s))"
        base = dead.removesuffix(SECRET)
        retry = "RETRYING after 2025-01-06T02:05:00Z"  # the first back-off
        assert _events(engine) == [
            ("dc1", "FIRING", f"dead: {retry} (webhook {base}/…: {refused}; 1 attempt(s)), "
             f"flaky: {retry} ({flaky}; 1 attempt(s)), mail: SENT"),
            ("dc2", "FIRING", f"dead: {retry} (webhook {base}/…: {refused}; 0 attempt(s)), "
             f"flaky: {retry} ({flaky}; 0 attempt(s)), mail: SENT"),
        ]  # fmt: skip

        alerts.after_run(at(2) + dt.timedelta(minutes=4))  # backing off: nothing is tried
        assert hooks.attempts == 2

        alerts.after_run(at(2) + dt.timedelta(minutes=6))  # the receiver is back: both go, in order
        assert hooks.attempts == 4
        assert [b["text"].split("\n")[0] for b in hooks.bodies(SECRET)] == [
            ":red_circle: [FIRING] silent: dc1",
            ":red_circle: [FIRING] silent: dc2",
        ]
        assert len(mail.received) == 2  # what was sent is not sent again
    sent = "flaky: SENT, mail: SENT"
    retry = "RETRYING after 2025-01-06T02:16:00Z"  # the second back-off: 10 minutes from the second try
    assert _events(engine) == [
        ("dc1", "FIRING", f"dead: {retry} (webhook {base}/…: {refused}; 2 attempt(s)), {sent}"),
        ("dc2", "FIRING", f"dead: {retry} (webhook {base}/…: {refused}; 0 attempt(s)), {sent}"),
    ]  # fmt: skip
    out = capsys.readouterr()
    assert "alert delivery failed" in out.out + out.err
    assert "s3cret" not in out.out + out.err


def test_a_broken_database_is_logged_not_raised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules, _ = parse_alert_tables(
        "test", [{"name": "s", "kind": "connector_silent", "hours": 1}], [], has_smtp=False
    )
    gone = make_engine(f"sqlite:///{tmp_path}/no/such/dir/ledger.db")
    try:
        AlertEngine(gone, AlertConfig(tuple(rules))).after_run(at(2))  # the scheduler's hook: must not raise
    finally:
        gone.dispose()
    out = capsys.readouterr()
    assert "alert evaluation failed" in out.out + out.err


@pytest.mark.parametrize("threads", [4])
def test_evaluators_take_turns(engine: Engine, put: Put, threads: int) -> None:
    silent(put, "dc1")
    rules, _ = parse_alert_tables(
        "test", [{"name": "s", "kind": "connector_silent", "hours": 1}], [], has_smtp=False
    )
    config = AlertConfig(tuple(rules))
    announced = at_once(threads, lambda: len(AlertEngine(engine, config).evaluate(at(2)).announced))
    assert sorted(announced) == [0] * (threads - 1) + [1]
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(AlertEvent)).scalar_one() == 1
