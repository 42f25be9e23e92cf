"""The reporting role and the views' contract: a member reads every view and nothing behind them;
every view and column is documented; money is NUMERIC; ``gpu-ledger reporting`` grants, revokes
and lists, and refuses what it cannot do with one line."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ProgrammingError
from typer.testing import CliRunner

from service.cli import app
from service.db import make_engine
from service.reporting.access import DEFAULT_ROLE

VIEWS = {
    "usage_cost_hourly_v1",
    "usage_cost_daily_v1",
    "device_usage_cost_hourly_v1",
    "device_usage_cost_daily_v1",
    "effective_cost_daily_v1",
    "idle_waste_daily_v1",
    "reconciliation_daily_v1",
    "unmonitored_spend_daily_v1",
    "connector_health_v1",
    "connector_runs_v1",
    "devices_v1",
    # migration 0016: v1 plus vendor and owner_rule
    "usage_cost_hourly_v2",
    "usage_cost_daily_v2",
    "device_usage_cost_hourly_v2",
    "device_usage_cost_daily_v2",
    "idle_waste_daily_v2",
    "devices_v2",
}
MONEY = {
    "cost",
    "idle_cost",
    "energy_cost",
    "allocated_idle_cost",
    "unallocated_idle_cost",
    "cost_per_gpu_hour",
    "cost_per_effective_gpu_hour",
    "billed_cost",
    "ledger_cost",
    "cost_variance",
}
#: The CLI test's login's password (a fresh Debian cluster trusts only postgres on 127.0.0.1).
PASSWORD = uuid.uuid4().hex
#: Tables a BI login must not read: the ledger, its partitions, tokens, bills, audit-worthy state.
FORBIDDEN = (
    "ledger_hour",
    "ledger_day",
    "ledger_group_day",
    "api_token",
    "billing_line",
    "connector_state",
    "device",
)


@pytest.mark.postgres
@pytest.mark.slow
def test_a_member_reads_every_view_and_nothing_behind_them(bi_engine: Engine) -> None:
    with bi_engine.connect() as conn:
        names = {
            n
            for (n,) in conn.execute(
                text("SELECT table_name FROM information_schema.views WHERE table_schema = 'reporting'")
            )
        }
        assert names == VIEWS
        for view in sorted(VIEWS):
            n = conn.execute(text(f"SELECT count(*) FROM reporting.{view}")).scalar_one()
            assert n > 0, view
        partition = conn.execute(
            text(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'public.ledger_hour'::regclass LIMIT 1"
            )
        ).scalar_one()
    for table in (*FORBIDDEN, f"ledger_hour_parts.{partition}"):
        with bi_engine.connect() as conn, pytest.raises(ProgrammingError, match="permission denied"):
            conn.execute(text(f"SELECT 1 FROM {table} LIMIT 1"))
    with bi_engine.connect() as conn, pytest.raises(ProgrammingError, match="permission denied"):
        conn.execute(text("CREATE VIEW reporting.mine AS SELECT 1 AS one"))


@pytest.mark.postgres
@pytest.mark.slow
def test_every_view_and_column_is_documented_and_money_is_numeric(reporting_engine: Engine) -> None:
    with reporting_engine.connect() as conn:
        undocumented = conn.execute(
            text(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'reporting' AND c.relkind = 'v' "
                "AND obj_description(c.oid, 'pg_class') IS NULL"
            )
        ).all()
        assert undocumented == []
        columns = conn.execute(
            text(
                "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), "
                "col_description(c.oid, a.attnum) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid "
                "WHERE n.nspname = 'reporting' AND c.relkind = 'v' AND a.attnum > 0"
            )
        ).all()
    assert {view for view, *_ in columns} == VIEWS
    assert [(v, col) for v, col, _, doc in columns if not doc] == []
    money = [(v, col, kind) for v, col, kind, _ in columns if col in MONEY]
    assert len(money) > 20 and all(kind.startswith("numeric") for *_, kind in money), money
    # GPU-hours are doubles in the service and in the views alike; the bill's are exact.
    kinds = {(v, col): kind for v, col, kind, _ in columns}
    assert kinds[("reconciliation_daily_v1", "billed_gpu_hours")] == "numeric"
    assert kinds[("usage_cost_hourly_v1", "hour_start")] == "timestamp with time zone"
    assert kinds[("usage_cost_daily_v1", "day")] == "date"


@pytest.fixture
def login(reporting_url: str) -> Iterator[str]:
    """A fresh LOGIN role of no group, dropped afterwards."""
    name = f"gpu_ledger_cli_{uuid.uuid4().hex[:10]}"
    admin = make_engine(reporting_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{PASSWORD}'"))
    try:
        yield name
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP ROLE IF EXISTS "{name}"'))
        admin.dispose()


def _cli(monkeypatch: pytest.MonkeyPatch, url: str, *args: str) -> tuple[int, str, str]:
    monkeypatch.delenv("GPU_LEDGER_CONFIG", raising=False)
    monkeypatch.setenv("GPU_LEDGER_DATABASE_URL", url)
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def _can_read(url: str, login: str) -> bool:
    engine = make_engine(make_url(url).set(username=login, password=PASSWORD))
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT count(*) FROM reporting.usage_cost_daily_v1"))
        return True
    except ProgrammingError:
        return False
    finally:
        engine.dispose()


@pytest.mark.postgres
@pytest.mark.slow
def test_cli_grants_revokes_and_lists(
    reporting_url: str, login: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert not _can_read(reporting_url, login)
    code, out, err = _cli(monkeypatch, reporting_url, "reporting", "grant", "--login", login)
    assert code == 0, err
    assert f'granted role "{DEFAULT_ROLE}" to "{login}"' in out
    assert _can_read(reporting_url, login)
    engine = make_engine(reporting_url)
    try:
        with engine.connect() as conn:
            settings = conn.execute(
                text(
                    "SELECT s.setconfig FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole "
                    "WHERE r.rolname = :n AND s.setdatabase = (SELECT oid FROM pg_database "
                    "WHERE datname = current_database())"
                ),
                {"n": login},
            ).scalar_one()
    finally:
        engine.dispose()
    assert settings == ["gpu_ledger.gpu_cost_share=1"]
    assert _cli(monkeypatch, reporting_url, "reporting", "grant", "--login", login)[0] == 0  # idempotent

    code, out, _ = _cli(monkeypatch, reporting_url, "reporting", "views")
    assert code == 0 and {line.split(":")[0] for line in out.splitlines()} == {
        f"reporting.{v}" for v in VIEWS
    }

    assert _cli(monkeypatch, reporting_url, "reporting", "revoke", "--login", login)[0] == 0
    assert not _can_read(reporting_url, login)

    code, _, err = _cli(monkeypatch, reporting_url, "reporting", "grant", "--login", "no_such_login_x")
    errors = [line for line in err.splitlines() if line.startswith("gpu-ledger: error:")]
    assert code == 2 and len(errors) == 1 and "no PostgreSQL role 'no_such_login_x'" in errors[0]
    code, _, err = _cli(monkeypatch, reporting_url, "reporting", "grant", "--login", "bad%name")
    assert code == 2 and "Traceback" not in err
    code, _, err = _cli(monkeypatch, f"sqlite:///{tmp_path / 'l.db'}", "reporting", "views")
    assert code == 2 and "PostgreSQL only" in err and "Traceback" not in err


def test_the_migration_leaves_sqlite_without_reporting_objects(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    try:
        with engine.connect() as conn:
            names = [n for (n,) in conn.execute(text("SELECT name FROM sqlite_master"))]
    finally:
        engine.dispose()
    assert names and not [n for n in names if "reporting" in n or n.endswith("_v1")]
