"""A time limit on the SQL of one request, enforced by the database driver itself.

PostgreSQL: ``statement_timeout`` set for the current transaction to the time left, so the server
cancels the statement (psycopg raises ``QueryCanceled``). SQLite: a progress handler that aborts
the running statement once the deadline has passed (``sqlite3.OperationalError: interrupted``).
Either way the worker thread is freed and the connection stays usable; :func:`is_timeout`
recognises both errors so the API can answer ``QUERY_TIMEOUT``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError

#: SQLite virtual-machine instructions between two looks at the clock (~0.1 ms of work).
SQLITE_PROGRESS_STEPS = 1000


class DeadlinePassed(Exception):
    """The request's time ran out before its next statement started."""


@contextmanager
def sql_deadline(conn: Connection, deadline: float | None) -> Iterator[None]:
    """Statements on ``conn`` inside the block are cancelled at ``deadline`` (``time.monotonic()``)."""
    if deadline is None:
        yield
        return
    left_s = deadline - time.monotonic()
    if left_s <= 0:
        raise DeadlinePassed
    if conn.dialect.name == "postgresql":
        # set_config(..., is_local => true) = SET LOCAL: it ends with this transaction.
        left_ms = max(1, math.ceil(left_s * 1000))
        conn.execute(text("SELECT set_config('statement_timeout', :ms, true)"), {"ms": f"{left_ms}ms"})
        yield
        return
    if conn.dialect.name == "sqlite":
        raw: Any = conn.connection.dbapi_connection
        raw.set_progress_handler(lambda: int(time.monotonic() > deadline), SQLITE_PROGRESS_STEPS)
        try:
            yield
        finally:
            raw.set_progress_handler(None, 0)
        return
    yield  # another database: no way to cancel, the request runs to its end


def is_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is a statement cancelled by :func:`sql_deadline`."""
    if isinstance(exc, DeadlinePassed):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    orig = exc.orig
    if getattr(orig, "sqlstate", None) == "57014":  # psycopg.errors.QueryCanceled
        return True
    return type(orig).__module__ == "sqlite3" and str(orig) == "interrupted"
