"""Monthly range partitions of ``ledger_hour`` on PostgreSQL (migration 0006), and their retention.

``ledger_hour`` is partitioned by RANGE (``hour_start``): one partition per calendar month UTC,
named ``ledger_hour_YYYY_MM``, plus ``ledger_hour_default`` for any row no month partition takes.
The partitions live in their own schema (:data:`SCHEMA`), so tools that list the database's tables
(Alembic's autogenerate drift check among them) see the one logical table.

A month's partition is made on demand by the writer that first writes it
(:func:`ensure_months`, called by ``store.replace_hours`` inside the ingest's transaction). Only
that month's first write pays for it: an advisory lock serialises concurrent creators, and
``ATTACH PARTITION`` locks the parent in SHARE UPDATE EXCLUSIVE mode, which readers do not wait
for. Writers that insert hours without ``replace_hours`` (billing's unmonitored instance-hours)
land in the DEFAULT partition when their month has none yet; the month's creation moves them into
it. SQLite has no partitions: every function here is a no-op there but :func:`prune`, which deletes.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Connection, text

from service.timeutil import hour_start, month_index, month_start

SCHEMA = "ledger_hour_parts"
PARENT = "ledger_hour"
DEFAULT = "ledger_hour_default"
#: pg_advisory_xact_lock key of partition creation ("ledger_h" as an integer).
_CREATE_LOCK = 0x6C65646765725F68


#: Rows a run writes from which :func:`analyze_parent` refreshes the planner's statistics.
ANALYZE_AFTER_ROWS = 100_000


def analyze_parent(conn: Connection) -> bool:
    """``ANALYZE ledger_hour`` where it is partitioned; True if it ran.

    Autovacuum analyzes the partitions but never a partitioned parent, and the planner estimates
    a query over the parent (the analytics' GROUP BY of hour × device) from the parent's own
    statistics: without them it guessed 17k groups for 144k and hashed every group instead of
    streaming pages from the (hour_index, device_id) index. A backfill is when they go stale.
    """
    if not is_partitioned(conn):
        return False
    conn.exec_driver_sql(f"ANALYZE {PARENT}")
    return True


def month_table(month: int) -> str:
    """Partition name of month index ``month`` (months since 1970-01)."""
    start = month_start(month)
    return f"ledger_hour_{start.year:04d}_{start.month:02d}"


def is_partitioned(conn: Connection) -> bool:
    """Whether this database's ``ledger_hour`` is a partitioned table (PostgreSQL after 0006)."""
    if conn.dialect.name != "postgresql":
        return False
    kind = conn.execute(
        text("SELECT c.relkind FROM pg_class c WHERE c.oid = to_regclass(:t)"), {"t": PARENT}
    ).scalar()
    return kind == "p"


def month_partitions(conn: Connection) -> dict[int, str]:
    """Month index → partition name of the month partitions attached to ``ledger_hour``."""
    names = conn.execute(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(:t)"
        ),
        {"t": PARENT},
    ).scalars()
    out: dict[int, str] = {}
    for name in names:
        if name == DEFAULT:
            continue
        year, month = int(name[-7:-3]), int(name[-2:])
        out[month_index(dt.datetime(year, month, 1, tzinfo=dt.UTC))] = name
    return out


def ensure_months(conn: Connection, first_hour: int, last_hour: int) -> list[str]:
    """Create the month partitions that hours ``[first_hour, last_hour]`` need and lack; their names."""
    if not is_partitioned(conn):
        return []
    wanted = range(month_index(hour_start(first_hour)), month_index(hour_start(last_hour)) + 1)
    if all(m in (have := month_partitions(conn)) for m in wanted):
        return []
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _CREATE_LOCK})
    have = month_partitions(conn)  # another writer may have made them while this one waited
    made = [create_month(conn, m) for m in wanted if m not in have]
    return made


def create_month(conn: Connection, month: int) -> str:
    """Create and attach month ``month``'s partition, moving its rows out of the DEFAULT partition."""
    name = month_table(month)
    lo, hi = month_start(month), month_start(month + 1)
    bounds = {"lo": lo, "hi": hi}
    conn.execute(text(f'CREATE TABLE "{SCHEMA}"."{name}" (LIKE "{PARENT}" INCLUDING DEFAULTS)'))
    conn.execute(
        text(
            f'WITH moved AS (DELETE FROM "{SCHEMA}"."{DEFAULT}" '
            "WHERE hour_start >= :lo AND hour_start < :hi RETURNING *) "
            f'INSERT INTO "{SCHEMA}"."{name}" SELECT * FROM moved'
        ),
        bounds,
    )
    # Literal bounds: partition bounds cannot be bind parameters. Both are UTC month starts.
    conn.execute(
        text(
            f'ALTER TABLE "{PARENT}" ATTACH PARTITION "{SCHEMA}"."{name}" '
            f"FOR VALUES FROM ('{lo.isoformat()}') TO ('{hi.isoformat()}')"
        )
    )
    return name
