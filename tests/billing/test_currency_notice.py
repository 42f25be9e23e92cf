"""A bill mixing currencies with no FX rate between them imports, and says so: in the ingest
summary, on the file (``billing_file.notice``), on the connector (``connector_state.notice``, the
``connectors`` query and ``gpu-ledger connectors``); once ``[[fx_rates]]`` has the pair, it is quiet."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from sqlalchemy import text
from starlette.testclient import TestClient
from typer.testing import CliRunner

from service.app import create_app
from service.billing.currency_mix import notice
from service.cli import app
from service.db import make_engine
from service.settings import load_settings

AZURE = Path(__file__).parents[1] / "fixtures" / "azure" / "ea_amortized_cost_2025-09.csv"
WINDOW = ["--start", "2025-09-01T00:00:00Z", "--end", "2025-10-01T00:00:00Z"]
SAID = "currencies=USD,EUR (no FX rate for EUR→USD: add [[fx_rates]])"


def export(path: Path) -> None:
    """The fixture's first 4 records, the last one billed in EUR."""
    with AZURE.open(encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle))[:5]
    rows[4][rows[0].index("BillingCurrencyCode")] = "EUR"
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    path.write_text(out.getvalue())


def test_mixed_currencies_without_fx_are_reported_then_quiet_with_a_rate(tmp_path: Path) -> None:
    export(tmp_path / "cost.csv")
    db = tmp_path / "ledger.db"
    config = tmp_path / "c.toml"
    base = f'database_url = "sqlite:///{db}"\n[[connectors]]\nname = "bills"\ntype = "azure_cost"\n'
    base += f'path = "{tmp_path / "cost.csv"}"\n'
    config.write_text(base)
    runner = CliRunner(env={k: v for k, v in os.environ.items() if not k.startswith("GPU_LEDGER_")})
    result = runner.invoke(app, ["ingest", "bills", *WINDOW, "--config", str(config)])
    assert result.exit_code == 0, result.stdout
    first, per_file = result.stdout.splitlines()[:2]
    quality = "findings=0 refused_cost=0"
    assert first.endswith(f"read=4 accepted=4 refused=0 skipped=0 replaced=0 {quality} {SAID}")
    assert per_file.endswith(f"read=4 accepted=4 refused=0 skipped=0 {quality} {SAID}")
    engine = make_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT notice FROM billing_file")).scalar_one() == SAID
            assert conn.execute(text("SELECT notice FROM connector_state")).scalar_one() == SAID
        settings = load_settings(config)
        reader = settings.model_copy(update={"auth": settings.auth.with_anonymous_read()})
        with TestClient(create_app(reader, engine)) as client:
            reply = client.post("/graphql", json={"query": "{ connectors { name status notice } }"}).json()
        assert reply == {"data": {"connectors": [{"name": "bills", "status": "OK", "notice": SAID}]}}
    finally:
        engine.dispose()
    listed = runner.invoke(app, ["connectors", "--config", str(config)])
    assert "currencies=USD,EUR (no FX rate for EUR→USD" in listed.stdout

    config.write_text(base + '[[fx_rates]]\nbase = "USD"\nquote = "EUR"\nday = 2025-09-01\nrate = "0.92"\n')
    result = runner.invoke(app, ["ingest", "bills", *WINDOW, "--config", str(config)])
    assert result.exit_code == 0 and "currencies=" not in result.stdout, result.stdout
    engine = make_engine(f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT notice FROM billing_file")).scalar_one() is None
            assert conn.execute(text("SELECT notice FROM connector_state")).scalar_one() is None
    finally:
        engine.dispose()


def test_the_notice_names_every_currency_by_lines_and_each_missing_pair_to_the_main_one() -> None:
    assert notice({"USD": 5}, set()) is None
    assert notice({"EUR": 1, "USD": 5, "GBP": 1}, {("GBP", "USD")}) == (
        "currencies=USD,EUR,GBP (no FX rate for EUR→USD: add [[fx_rates]])"
    )
    tie = notice({"EUR": 2, "USD": 2}, set())
    assert tie == "currencies=EUR,USD (no FX rate for USD→EUR: add [[fx_rates]])"
    assert notice({"EUR": 1, "USD": 5}, {("EUR", "USD")}) is None
