"""Grant a BI login read access to the ``reporting`` views through the group role, and revoke it.

The role (``gpu_ledger_reporting`` unless told otherwise) is a NOLOGIN group: USAGE on schema
``reporting`` and SELECT on its views, nothing else; views run with their owner's rights, so its
members read them without any access to the tables behind them. Migration 0008 creates and grants
it when the migrating user may create roles; :func:`grant` does the same idempotently (so it also
repairs a database migrated by a user who could not), then makes the login a member.

Statements are built from quoted identifiers only (the dialect's preparer); the session settings
the views read (``gpu_ledger.gpu_cost_share``) are set per login and database with a bound literal.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import Connection, text

from service.db import driver_reason
from service.reporting import DEFAULT_ROLE

SCHEMA = "reporting"
#: PostgreSQL's identifier limit (NAMEDATALEN - 1 bytes).
MAX_IDENTIFIER_BYTES = 63


class ReportingError(Exception):
    """A grant that cannot be made (no PostgreSQL, no such login, no schema): a message for the user."""


@dataclass(frozen=True)
class Granted:
    login: str
    role: str
    database: str
    created_role: bool
    #: None when the setting was applied, else why not (the views then use their default, 1).
    cost_share_warning: str | None


def _check_name(what: str, name: str) -> str:
    if not name or not name.strip():
        raise ReportingError(f"{what} must not be empty")
    if len(name.encode()) > MAX_IDENTIFIER_BYTES:
        raise ReportingError(f"{what} {name!r} is longer than {MAX_IDENTIFIER_BYTES} bytes")
    if "\x00" in name or "%" in name:  # '%' would be read as a driver placeholder
        raise ReportingError(f"{what} {name!r} contains a NUL or % character")
    return name


def _require_postgres(conn: Connection) -> None:
    if conn.dialect.name != "postgresql":
        raise ReportingError(
            f"the reporting views exist on PostgreSQL only (this database is {conn.dialect.name}); "
            "BI tools connect to PostgreSQL"
        )
    if conn.execute(text("SELECT 1 FROM pg_namespace WHERE nspname = :s"), {"s": SCHEMA}).first() is None:
        raise ReportingError(f"schema {SCHEMA} is missing: run gpu-ledger migrate first")


def _role_exists(conn: Connection, name: str) -> bool:
    return conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :n"), {"n": name}).first() is not None


def ensure_role(conn: Connection, role: str = DEFAULT_ROLE) -> bool:
    """Create ``role`` (NOLOGIN) if absent and grant it the schema's views; True if it was created."""
    _check_name("role", role)
    _require_postgres(conn)
    q = conn.dialect.identifier_preparer.quote
    created = False
    if not _role_exists(conn, role):
        conn.exec_driver_sql(f"CREATE ROLE {q(role)} NOLOGIN")
        created = True
    conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA {SCHEMA} TO {q(role)}")
    conn.exec_driver_sql(f"GRANT SELECT ON ALL TABLES IN SCHEMA {SCHEMA} TO {q(role)}")
    conn.exec_driver_sql(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {SCHEMA} GRANT SELECT ON TABLES TO {q(role)}")
    return created


def grant(
    conn: Connection, login: str, role: str = DEFAULT_ROLE, gpu_cost_share: Decimal = Decimal(1)
) -> Granted:
    """Make ``login`` (an existing PostgreSQL role) a member of ``role``; see the module docstring.

    ``gpu_cost_share``: the service's setting, stored for ``login`` in this database so that
    ``reporting.reconciliation_daily_v1`` prices the bill as the service does.
    """
    _check_name("login", login)
    created = ensure_role(conn, role)
    if not _role_exists(conn, login):
        raise ReportingError(
            f"no PostgreSQL role {login!r}: create the BI login first "
            f"(CREATE ROLE \"{login}\" LOGIN PASSWORD '…'), then run this again"
        )
    if login == role:
        raise ReportingError("the login must be another role than the reporting group role")
    q = conn.dialect.identifier_preparer.quote
    conn.exec_driver_sql(f"GRANT {q(role)} TO {q(login)}")
    database = str(conn.execute(text("SELECT current_database()")).scalar_one())
    warning = None
    share = format(Decimal(gpu_cost_share), "f")
    try:
        with conn.begin_nested():
            conn.exec_driver_sql(
                f"ALTER ROLE {q(login)} IN DATABASE {q(database)} "
                f"SET gpu_ledger.gpu_cost_share = '{share}'"  # a Decimal's digits: no quoting needed
            )
    except Exception as exc:  # noqa: BLE001  (any refusal: the grant itself stands)
        warning = f"could not store gpu_ledger.gpu_cost_share = {share} for {login}: {driver_reason(exc)}"
    return Granted(login, role, database, created, warning)


def revoke(conn: Connection, login: str, role: str = DEFAULT_ROLE) -> None:
    """Take ``login`` out of ``role`` (its other rights are untouched)."""
    _check_name("login", login)
    _check_name("role", role)
    _require_postgres(conn)
    for what, name in (("login", login), ("role", role)):
        if not _role_exists(conn, name):
            raise ReportingError(f"no PostgreSQL role {name!r} ({what})")
    q = conn.dialect.identifier_preparer.quote
    conn.exec_driver_sql(f"REVOKE {q(role)} FROM {q(login)}")


@dataclass(frozen=True)
class ViewInfo:
    name: str
    description: str


def views(conn: Connection) -> list[ViewInfo]:
    """The schema's views with their comments, by name."""
    _require_postgres(conn)
    rows = conn.execute(
        text(
            "SELECT c.relname, coalesce(obj_description(c.oid, 'pg_class'), '') FROM pg_class AS c "
            "JOIN pg_namespace AS n ON n.oid = c.relnamespace "
            "WHERE n.nspname = :s AND c.relkind = 'v' ORDER BY c.relname"
        ),
        {"s": SCHEMA},
    )
    return [ViewInfo(str(name), str(doc)) for name, doc in rows]
