"""The ledger's version: a counter every answer-changing commit bumps, in its own transaction.

Every process (each ``serve`` worker, ``ingest``, ``import-billing``) reads the same row, so an
answer cached under version *v* is served only while no write has committed since it was
computed: a reader that starts after a commit reads the new version (PostgreSQL READ COMMITTED
and SQLite both show committed rows to a new statement), and a write in flight is invisible to
both the answers and the version until it commits.

Writers call :func:`bump` as the LAST statement of their transaction: the UPDATE locks the row
until commit, so concurrent writers queue only for the instant between their bump and their
commit, and — since nothing is locked after it — two writers can never deadlock on it.
"""

from __future__ import annotations

from sqlalchemy import Connection, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import Session

from service.dbtypes import table_of
from service.models import LedgerVersion

_TABLE = table_of(LedgerVersion)
_ROW_ID = 1
#: :func:`current` as plain SQL, for a reader outside SQLAlchemy (the answer cache's async read).
CURRENT_SQL = "SELECT version FROM ledger_version WHERE id = 1"


def bump(conn: Connection) -> None:
    """Raise the version by one inside ``conn``'s transaction (committed or rolled back with it).

    The row is created by migration 0005; a schema made by ``create_all`` or emptied (some tests)
    has none, and the first bump inserts it — as one ``INSERT … ON CONFLICT DO UPDATE``, so two
    writers bumping a missing row at once queue on it instead of one failing on the key."""
    dialect = conn.dialect.name
    if dialect in ("postgresql", "sqlite"):
        insert = pg_insert(_TABLE) if dialect == "postgresql" else sqlite_insert(_TABLE)
        conn.execute(
            insert.values(id=_ROW_ID, version=1).on_conflict_do_update(
                index_elements=[_TABLE.c.id], set_={"version": _TABLE.c.version + 1}
            )
        )
        return
    changed = conn.execute(
        update(_TABLE).where(_TABLE.c.id == _ROW_ID).values(version=_TABLE.c.version + 1)
    ).rowcount
    if not changed:
        conn.execute(_TABLE.insert().values(id=_ROW_ID, version=1))


def current(conn: Connection) -> int:
    """The committed version as ``conn`` sees it now (0 before the first bump)."""
    found = conn.execute(select(_TABLE.c.version).where(_TABLE.c.id == _ROW_ID)).scalar()
    return int(found) if found is not None else 0


def bump_session(session: Session) -> None:
    """:func:`bump` in ``session``'s transaction, after its pending changes are flushed (so the
    version row is still the last thing it locks)."""
    session.flush()
    bump(session.connection())
