"""Migration 0008 where the reporting role does not exist and the migrating user may not create roles
(a managed PostgreSQL, where the service's user owns its database and nothing more): the migration
completes without the role, and ``gpu-ledger reporting grant``, run by a user who may, creates and
grants it afterwards.

The shared server always has the role already (every test database's migration made it), so this
runs a throwaway cluster of its own (initdb as the ``postgres`` OS user, a free port, trust on
127.0.0.1), as docs/testing.md describes."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError

from service.db import make_engine, migrate
from service.reporting.access import DEFAULT_ROLE, grant

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
REQUIRE_PG = os.environ.get("GPU_LEDGER_REQUIRE_POSTGRES", "") not in ("", "0", "false")


def _bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return str(candidates[-1]) if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def cluster() -> Iterator[str]:
    """A fresh PostgreSQL cluster on 127.0.0.1: its superuser URL (database postgres)."""
    initdb, pg_ctl, runuser = _bin("initdb"), _bin("pg_ctl"), shutil.which("runuser")
    if not (initdb and pg_ctl and runuser and os.geteuid() == 0):
        if REQUIRE_PG:
            pytest.fail("a throwaway cluster needs root, runuser, initdb and pg_ctl", pytrace=False)
        pytest.skip("a throwaway cluster needs root, runuser, initdb and pg_ctl")
    root = Path(tempfile.mkdtemp(prefix="gpu-ledger-pg-"))
    shutil.chown(root, "postgres")
    data, port = root / "data", _free_port()

    def as_postgres(*args: str) -> None:
        subprocess.run([runuser, "-u", "postgres", "--", *args], check=True, capture_output=True, timeout=60)

    try:
        as_postgres(initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        opts = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} -c fsync=off"
        as_postgres(pg_ctl, "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "start")
        try:
            yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
        finally:
            as_postgres(pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_migration_without_createrole_then_grant_by_an_admin(cluster: str) -> None:
    admin = make_engine(cluster, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text("CREATE ROLE owner LOGIN CREATEDB"))  # no CREATEROLE
            conn.execute(text("CREATE ROLE bi LOGIN"))
            conn.execute(text("CREATE DATABASE ledger OWNER owner"))
    finally:
        admin.dispose()
    as_owner = cluster.replace("postgres@", "owner@").rsplit("/", 1)[0] + "/ledger"
    as_admin = cluster.rsplit("/", 1)[0] + "/ledger"
    as_bi = cluster.replace("postgres@", "bi@").rsplit("/", 1)[0] + "/ledger"

    migrate(as_owner)  # completes: the role is left for later, with a NOTICE
    admin = make_engine(as_admin)
    bi = make_engine(as_bi)
    try:
        with admin.connect() as conn:
            roles = conn.execute(
                text("SELECT count(*) FROM pg_roles WHERE rolname = :r"), {"r": DEFAULT_ROLE}
            )
            assert roles.scalar_one() == 0
            assert conn.execute(text("SELECT count(*) FROM reporting.usage_cost_daily_v1")).scalar_one() == 0
        with bi.connect() as conn, pytest.raises(ProgrammingError, match="permission denied"):
            conn.execute(text("SELECT 1 FROM reporting.devices_v1"))

        with admin.begin() as conn:
            done = grant(conn, "bi")
        assert done.created_role and done.database == "ledger" and done.cost_share_warning is None
        with bi.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM reporting.devices_v1")).scalar_one() == 0
            with pytest.raises(ProgrammingError, match="permission denied"):
                conn.execute(text("SELECT 1 FROM ledger_hour"))
    finally:
        admin.dispose()
        bi.dispose()
