"""`gpu-ledger alerts evaluate`: one evaluation now and the outbox's due sends, for deployments
that run connectors from cron; exit 3 while a receiver (a real HTTP one on 127.0.0.1) refuses."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
from receiver import http_receiver
from sqlalchemy import update
from typer.testing import CliRunner

from service.cli import app
from service.db import make_engine, migrate
from service.models import AlertDelivery, ConnectorState


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):
        if var.startswith("GPU_LEDGER_"):
            monkeypatch.delenv(var)


def test_evaluate_announces_reports_a_refused_send_then_sends_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    migrate(url)
    engine = make_engine(url)
    three_hours_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=3)
    try:
        with engine.begin() as conn:
            conn.execute(
                ConnectorState.__table__.insert(),  # type: ignore[attr-defined]
                [{"name": "dc1", "type": "x", "status": "OK", "last_success_at": three_hours_ago,
                  "watermark": three_hours_ago}],
            )  # fmt: skip
        with http_receiver() as receiver:
            config = tmp_path / "gpu-ledger.toml"
            config.write_text(
                f'database_url = "{url}"\n'
                f'[[alert_channels]]\nname = "hook"\ntype = "webhook"\nurl = "{receiver.base}/alerts"\n'
                "retries = 0\n"
                '[[alerts]]\nname = "silent"\nkind = "connector_silent"\nhours = 1\nchannels = ["hook"]\n'
            )
            args = ["alerts", "evaluate", "--config", str(config)]
            receiver.script = [503]
            first = CliRunner().invoke(app, args)
            assert first.exit_code == 3, first.output
            assert first.stdout == (
                "1 announced (1 firing, 0 resolved); sent 0, failed 1, not tried 0; pending: hook: 1\n"
            )
            assert f"send to hook failed: webhook {receiver.base}/…: HTTP 503" in first.stderr

            with engine.begin() as conn:  # the back-off has passed
                conn.execute(update(AlertDelivery).values(next_attempt_at=three_hours_ago))
            second = CliRunner().invoke(app, args)
            assert second.exit_code == 0, second.output
            assert second.stdout == (
                "0 announced (0 firing, 0 resolved); sent 1, failed 0, not tried 0; pending: none\n"
            )
            assert [b["subject"] for b in receiver.bodies("/alerts")] == ["dc1"]
    finally:
        engine.dispose()


def test_evaluate_without_rules_says_so(tmp_path: Path) -> None:
    config = tmp_path / "gpu-ledger.toml"
    config.write_text(f'database_url = "sqlite:///{tmp_path / "x.db"}"\n')
    result = CliRunner().invoke(app, ["alerts", "evaluate", "--config", str(config)])
    assert result.exit_code == 2
    assert "no [[alerts]] rule is configured" in result.output
