"""Fixtures of the report tests: the ``serve --demo`` fleet's November 2026 in a SQLite database.

The demo's own data path (``with_demo`` settings, the synthetic connector, ``ingest_window``) for
fixed dates — 2026-10-01 to 2026-12-01, so November and the month before it are whole — plus
a month of AWS bills for two instances (FOCUS, through the billing importer, as the browser
tests' week) and USD→EUR rates for every day. Built once per test session (a file lock:
the first xdist worker builds it, the others wait) and copied per module that asks for it.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from browser.demo_bills import write_bills
from built_once import built_once
from sqlalchemy import Engine

from connectors.registry import default_registry
from service.billing.ingest import ingest_billing
from service.bootstrap import sync_config
from service.db import make_engine, migrate
from service.demo import with_demo
from service.ledger.ingest import ingest_window
from service.settings import Settings

UTC = dt.UTC
START = dt.datetime(2026, 10, 1, tzinfo=UTC)
NOVEMBER = (dt.datetime(2026, 11, 1, tzinfo=UTC), dt.datetime(2026, 12, 1, tzinfo=UTC))
END = NOVEMBER[1]


def eur_rates() -> list[dict[str, object]]:
    """1 USD = 0.9 + day/1000 EUR on each day from START to END (each day's rate differs)."""
    days = (END - START).days
    return [
        {"base": "USD", "quote": "EUR", "day": (START + dt.timedelta(days=n)).date(),
         "rate": Decimal("0.9") + Decimal(n) / 1000}
        for n in range(days)
    ]  # fmt: skip


def demo_settings(url: str) -> Settings:
    return with_demo(Settings(database_url=url, fx_rates=eur_rates(), auth={"anonymous_read": False}))


def _build(path: Path) -> None:
    url = f"sqlite:///{path}"
    migrate(url)
    engine = make_engine(url)
    try:
        settings = demo_settings(url)
        sync_config(engine, settings)
        connector = default_registry().build(settings.connector("demo"))
        ran_at = END + dt.timedelta(hours=6)
        ingest_window(engine, "demo", connector, START, END, sites=settings.sites, clock=lambda: ran_at)
        first, _ = NOVEMBER
        bills = write_bills(path.parent / f"{path.stem}-bills", first, 30)
        registry = default_registry()
        focus = registry.build(registry.validate({"name": "aws-bills", "type": "focus", "path": str(bills)}))
        result = ingest_billing(engine, "aws-bills", focus, first, END, clock=lambda: ran_at)
        assert result.status == "OK" and result.refused == 0, result
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def _november_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built_once(tmp_path_factory, "reports-demo-2026-11.db", _build)


@pytest.fixture(scope="module")
def november_url(_november_template: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite URL of this module's copy of the demo's November."""
    mine = tmp_path_factory.mktemp("reports-demo") / "ledger.db"
    shutil.copyfile(_november_template, mine)
    return f"sqlite:///{mine}"


@pytest.fixture(scope="module")
def november(november_url: str) -> Iterator[Engine]:
    engine = make_engine(november_url)
    try:
        yield engine
    finally:
        engine.dispose()
