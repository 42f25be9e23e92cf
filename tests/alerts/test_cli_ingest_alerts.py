"""`gpu-ledger ingest` run by hand evaluates the alert rules as `serve` does after each scheduled
run: the synthetic fleet's idle notebooks, found by a backfill, are announced once to a real HTTP
receiver; the same window ingested again changes nothing and announces nothing more."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from receiver import http_receiver
from sqlalchemy import func, select
from typer.testing import CliRunner

from service.cli import app
from service.db import make_engine
from service.models import AlertEvent


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):
        if var.startswith("GPU_LEDGER_"):
            monkeypatch.delenv(var)


def test_a_hand_run_ingest_announces_what_it_finds_once(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    with http_receiver() as receiver:
        config = tmp_path / "gpu-ledger.toml"
        config.write_text(
            f'database_url = "sqlite:///{db}"\n'
            '[[connectors]]\nname = "demo"\ntype = "synthetic"\n'
            f'[[alert_channels]]\nname = "hook"\ntype = "webhook"\nurl = "{receiver.base}/alerts"\n'
            '[[alerts]]\nname = "zombies"\nkind = "idle_workload"\nhours = 2\nchannels = ["hook"]\n'
        )
        args = [
            "ingest",
            "demo",
            "--start",
            "2026-11-02T00:00Z",
            "--end",
            "2026-11-02T12:00Z",
            "--config",
            str(config),
        ]
        first = CliRunner().invoke(app, args)
        assert first.exit_code == 0, first.output
        announced = receiver.bodies("/alerts")
        assert announced and {b["state"] for b in announced} == {"FIRING"}
        assert {b["rule"] for b in announced} == {"zombies"}
        assert len({b["subjectKey"] for b in announced}) == len(announced)  # each workload once

        again = CliRunner().invoke(app, args)
        assert again.exit_code == 0, again.output
        assert len(receiver.bodies("/alerts")) == len(announced)  # still firing: nothing re-sent

    engine = make_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            fired = conn.execute(select(func.count()).select_from(AlertEvent.__table__)).scalar_one()  # type: ignore[attr-defined]
    finally:
        engine.dispose()
    assert fired == len(announced)
