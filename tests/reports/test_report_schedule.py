"""Scheduled reports e-mailed to a real SMTP server (aiosmtpd on 127.0.0.1): one e-mail per closed
period with the HTML report as its body and the CSV attached, never sent again — not by the next
tick, not after a restart — and a failed send tried again. Data: the hand-made week of
test_report_hand (2025-W02: team t1's cost is 10, team t2's 6, the pool's 10)."""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import io
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from ledger_rows import put, row  # noqa: F401  (put: fixture)
from sqlalchemy import Engine, select
from starlette.testclient import TestClient

from service.app import create_app
from service.models import ReportDelivery
from service.reports.config import ReportSchedule
from service.reports.schedule import ReportSender, due_period, report_sender, send_time
from service.scheduler import Scheduler
from service.settings import ConfigError, load_settings

UTC = dt.UTC
PORTS = range(18600, 18650)  # this feature's range
Put = Callable[[Iterable[Any]], None]


def _free_port() -> int:
    for port in PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS}")


class _Inbox:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], EmailMessage]] = []

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:  # noqa: N802
        import email
        import email.policy

        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        self.messages.append((list(envelope.rcpt_tos), message))
        return "250 OK"


@contextmanager
def smtp(port: int | None = None) -> Iterator[tuple[int, _Inbox]]:
    inbox = _Inbox()
    port = port or _free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, inbox
    finally:
        controller.stop()


def _settings(tmp_path: Path, db_url: str, port: int, reports: str) -> Any:
    config = tmp_path / "ledger.toml"
    config.write_text(
        f'database_url = "{db_url}"\n'
        f'[smtp]\nhost = "127.0.0.1"\nport = {port}\nstarttls = false\nfrom_addr = "ledger@example.com"\n'
        f"{reports}"
    )
    return load_settings(config)


WEEKLY_T1 = """
[[reports]]
name = "t1-weekly"
period = "weekly"
team = "t1"
to = ["finops@example.com", "lead@example.com"]
day = 2
hour = 6
"""


@pytest.fixture
def week(engine: Engine, put: Put) -> Engine:  # noqa: F811
    put([
        row(0, "GPU-a", "job1", cost="10", idle_cost="4", idle_s=1440.0, busy_s=2160.0, project="p1", team="t1"),  # noqa: E501
        row(1, "GPU-a", "", cost="10", idle_cost="10", idle_s=3600.0, busy_s=0.0),
        row(24, "GPU-b", "job2", cost="6", idle_cost="0", idle_s=0.0, busy_s=3600.0, project="p2", team="t2"),
    ])  # fmt: skip
    return engine


def _url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def test_when_a_period_is_due() -> None:
    weekly = ReportSchedule(name="w", period="weekly", to=["a@example.com"], day=2, hour=6)
    monthly = ReportSchedule(name="m", period="monthly", to=["a@example.com"], day=3, hour=0)
    # 2025-W02 closes on Monday 13 January; due on its Tuesday (day 2) at 06:00 UTC.
    # Before that, the week before it is the one due (sent long ago, unless the service was down).
    assert due_period(weekly, dt.datetime(2025, 1, 14, 5, 59, tzinfo=UTC)).label == "2025-W01"  # type: ignore[union-attr]
    due = due_period(weekly, dt.datetime(2025, 1, 14, 6, tzinfo=UTC))
    assert due is not None and due.label == "2025-W02"
    assert send_time(weekly, due) == dt.datetime(2025, 1, 14, 6, tzinfo=UTC)
    # Any later in the week it is still W02 that is due (sent once, see below), W03 from the next Tuesday.
    assert due_period(weekly, dt.datetime(2025, 1, 20, 23, tzinfo=UTC)).label == "2025-W02"  # type: ignore[union-attr]
    assert due_period(monthly, dt.datetime(2025, 2, 2, 23, tzinfo=UTC)).label == "2024-12"  # type: ignore[union-attr]
    assert due_period(monthly, dt.datetime(2025, 2, 3, tzinfo=UTC)).label == "2025-01"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('name = "x"\nperiod = "daily"\nto = ["a@example.com"]', "period"),
        ('name = "x"\nperiod = "weekly"\nto = ["a@example.com"]\nday = 8', "ISO weekday"),
        ('name = "x"\nperiod = "monthly"\nto = ["a@example.com"]\nday = 31', "day"),
        ('name = "x"\nperiod = "monthly"\nto = ["a@example.com\\r\\nBcc: b@example.com"]', "e-mail address"),
        ('name = "x"\nperiod = "monthly"\nto = []', "to"),
        ('name = "../x"\nperiod = "monthly"\nto = ["a@example.com"]', "name"),
        ('name = "x"\nperiod = "monthly"\nto = ["a@example.com"]\nproject = "a"\nteam = "b"', "not both"),
        ('name = "x"\nperiod = "monthly"\nto = ["a@example.com"]\nformats = ["pdf"]', "formats"),
        ('name = "x"\nperiod = "monthly"\nto = ["a@example.com"]\ncurrency = "EURO"', "currency"),
    ],
)
def test_bad_report_tables_are_config_errors(tmp_path: Path, table: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        _settings(tmp_path, "sqlite:///x.db", 25, f"[[reports]]\n{table}\n")


def test_reports_need_smtp_and_unique_names(tmp_path: Path) -> None:
    config = tmp_path / "ledger.toml"
    config.write_text(WEEKLY_T1)
    with pytest.raises(ConfigError, match=r"add an \[smtp\] table"):
        load_settings(config)
    with pytest.raises(ConfigError, match="t1-weekly twice"):
        _settings(tmp_path, "sqlite:///x.db", 25, WEEKLY_T1 + WEEKLY_T1)


def test_one_email_per_period_never_resent(week: Engine, tmp_path: Path) -> None:
    now = [dt.datetime(2025, 1, 14, 5, tzinfo=UTC)]
    with smtp() as (port, inbox):
        settings = _settings(tmp_path, _url(week), port, WEEKLY_T1)
        sender = report_sender(week, settings, clock=lambda: now[0])
        assert sender is not None
        assert sender.run() == [("t1-weekly", "2025-W01")]  # W02 is not due before Tuesday 06:00
        now[0] = dt.datetime(2025, 1, 14, 6, 30, tzinfo=UTC)
        assert sender.run() == [("t1-weekly", "2025-W02")]
        assert sender.run() == []  # the next tick
        restarted = report_sender(week, settings, clock=lambda: now[0])  # a new process
        assert restarted is not None and restarted.run() == []
        assert len(inbox.messages) == 2
        rcpt, message = inbox.messages[1]
        assert rcpt == ["finops@example.com", "lead@example.com"]
        assert message["Subject"] == "GPU cost report 2025-W02 – team t1"
        text = message.get_body(("plain",))
        html = message.get_body(("html",))
        assert text is not None and "Cost: 10.00 USD" in text.get_content()
        assert html is not None and 'id="total-cost" data-value="10.000000000"' in html.get_content()
        (attachment,) = list(message.iter_attachments())
        assert attachment.get_filename() == "gpu-report-2025-W02-team.csv"
        rows = list(csv.DictReader(io.StringIO(attachment.get_content())))
        totals = {r["measure"]: r["value"] for r in rows if r["section"] == "total"}
        assert Decimal(totals["cost"]) == 10 and Decimal(totals["idle_cost"]) == 4
        # The next week is due a week later: one more e-mail, for W03.
        now[0] = dt.datetime(2025, 1, 21, 6, tzinfo=UTC)
        assert restarted.run() == [("t1-weekly", "2025-W03")]
        assert len(inbox.messages) == 3
    with week.connect() as conn:
        sent = conn.execute(select(ReportDelivery.period, ReportDelivery.recipients)).all()  # type: ignore[call-overload]
    assert sorted(sent) == [("2025-W01", 2), ("2025-W02", 2), ("2025-W03", 2)]


def test_a_failed_send_is_tried_again(week: Engine, tmp_path: Path) -> None:
    port = _free_port()  # nothing listens there yet
    settings = _settings(tmp_path, _url(week), port, WEEKLY_T1)
    clock = lambda: dt.datetime(2025, 1, 15, tzinfo=UTC)  # noqa: E731
    sender = report_sender(week, settings, clock=clock)
    assert sender is not None and sender.run() == []
    with week.connect() as conn:
        assert conn.execute(select(ReportDelivery)).all() == []  # the claim was released
    with smtp(port) as (_, inbox):
        assert sender.run() == [("t1-weekly", "2025-W02")]
        assert len(inbox.messages) == 1


def test_the_scheduler_runs_the_sender_and_a_restart_sends_nothing(week: Engine, tmp_path: Path) -> None:
    clock = lambda: dt.datetime(2025, 1, 16, 12, tzinfo=UTC)  # noqa: E731

    async def one_scheduler_run(sender: ReportSender) -> None:
        scheduler = Scheduler(week, [], jobs=[sender])
        await scheduler.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _delivered(week):
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        await scheduler.stop()

    with smtp() as (port, inbox):
        settings = _settings(tmp_path, _url(week), port, WEEKLY_T1)
        for _ in range(2):  # the second scheduler is the service after a restart
            sender = report_sender(week, settings, clock=clock)
            assert sender is not None
            asyncio.run(one_scheduler_run(sender))
        assert [m["Subject"] for _, m in inbox.messages] == ["GPU cost report 2025-W02 – team t1"]


def _delivered(engine: Engine) -> bool:
    with engine.connect() as conn:
        return (
            conn.execute(select(ReportDelivery).where(ReportDelivery.sent_at.is_not(None))).first()
            is not None
        )  # type: ignore[union-attr]


def test_serve_sends_scheduled_reports(week: Engine, tmp_path: Path) -> None:
    """The app's scheduler (the process holding the scheduler lock) carries the sender: the
    latest closed week — whatever today is — goes out once."""
    with smtp() as (port, inbox):
        settings = _settings(
            tmp_path,
            _url(week),
            port,
            WEEKLY_T1.replace("day = 2", "day = 1").replace("hour = 6", "hour = 0"),
        )
        with TestClient(create_app(settings, week, run_scheduler=True)):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not inbox.messages:
                time.sleep(0.1)
        assert len(inbox.messages) == 1
        assert inbox.messages[0][1]["Subject"].startswith("GPU cost report ")
