"""Fixtures of the reporting tests: one PostgreSQL database per session holding the demo fleet
(2025-09-01 00:00 to 09-02 06:00) and the billing scenario of tests/billing (every reconciliation
status on 2025-09-03, an account credit added), and a BI login that is a member of the reporting
role — created for the session and dropped after it."""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import Iterator
from decimal import Decimal

import pytest
from billing.billing_rows import DAY3, add, at, line, scenario
from export.helpers import load_demo_fleet
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from service.billing.rates import reprice
from service.db import make_engine, migrate
from service.reporting.access import grant

ADMIN_URL = os.environ.get("GPU_LEDGER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REQUIRE_PG = os.environ.get("GPU_LEDGER_REQUIRE_POSTGRES", "") not in ("", "0", "false")
#: The account credit: a resource-less Credit line (ACCOUNT_ADJUSTMENT in reconciliation).
CREDIT = "-50.25"


def _admin() -> Engine:
    return make_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})


def load_fleet_and_bills(engine: Engine) -> None:
    load_demo_fleet(engine)
    credit = line(None, DAY3, at(24), CREDIT, charge_category="Credit", charge_type="Credit")
    add(engine, [*scenario(), credit])
    reprice(engine, DAY3, DAY3 + dt.timedelta(days=1))


@pytest.fixture(scope="session")
def reporting_url() -> Iterator[str]:
    """A migrated database with the demo fleet and the billing scenario (read-only for tests)."""
    admin = _admin()
    name = f"gpu_ledger_reporting_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # noqa: BLE001  (any connection failure means "no server")
        admin.dispose()
        if REQUIRE_PG:
            pytest.fail(f"PostgreSQL required but unreachable: {exc}", pytrace=False)
        pytest.skip(f"PostgreSQL unreachable: {type(exc).__name__}")
    url = make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        migrate(url)
        engine = make_engine(url)
        try:
            load_fleet_and_bills(engine)
        finally:
            engine.dispose()
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def reporting_engine(reporting_url: str) -> Iterator[Engine]:
    engine = make_engine(reporting_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def bi_login(reporting_url: str) -> Iterator[str]:
    """A LOGIN role granted the reporting role by ``service.reporting.access.grant``; its URL."""
    login = f"gpu_ledger_bi_{uuid.uuid4().hex[:10]}"
    # a password: .ci/run's fresh cluster trusts only postgres on 127.0.0.1, others use scram
    password = uuid.uuid4().hex
    admin = _admin()
    with admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE \"{login}\" LOGIN PASSWORD '{password}'"))
    engine = make_engine(reporting_url)
    try:
        with engine.begin() as conn:
            done = grant(conn, login, gpu_cost_share=Decimal(1))
        assert done.cost_share_warning is None
        yield (
            make_url(reporting_url)
            .set(username=login, password=password)
            .render_as_string(hide_password=False)
        )
    finally:
        engine.dispose()
        with admin.connect() as conn:
            # DROP ROLE takes its memberships and per-database settings with it
            conn.execute(text(f'DROP ROLE IF EXISTS "{login}"'))
        admin.dispose()


@pytest.fixture(scope="session")
def bi_engine(bi_login: str) -> Iterator[Engine]:
    engine = make_engine(bi_login)
    yield engine
    engine.dispose()
