"""How autogenerate renders and compares GPU Ledger's own column types.

Kept out of ``env.py`` (which only runs under Alembic) so tests can use the same comparison.
"""

from __future__ import annotations

from typing import Any

from sqlmodel.sql.sqltypes import AutoString

from service.dbtypes import UTCDateTime
from service.money import ExactDecimal


def render_item(type_: str, obj: Any, autogen_context: Any) -> str | bool:
    """Render our column types so revisions import only ``sa`` and small stable names."""
    if type_ != "type":
        return False
    if isinstance(obj, ExactDecimal):  # Money, Quantity, FxRateType: no-argument subclasses
        cls = type(obj)
        autogen_context.imports.add(f"from {cls.__module__} import {cls.__name__}")
        return f"{cls.__name__}()"
    if isinstance(obj, UTCDateTime):
        autogen_context.imports.add("from service.dbtypes import UTCDateTime")
        return "UTCDateTime()"
    if isinstance(obj, AutoString):
        # AutoString is a plain VARCHAR; sa.String keeps revisions free of sqlmodel internals.
        return f"sa.String(length={obj.length})" if obj.length else "sa.String()"
    return False


def compare_type(
    context_: Any, inspected_column: Any, metadata_column: Any, inspected_type: Any, metadata_type: Any
) -> bool | None:
    """Compare what our TypeDecorators really store on this dialect (Money is BIGINT on SQLite)."""
    dialect = context_.dialect
    if isinstance(metadata_type, ExactDecimal | UTCDateTime):
        impl = metadata_type.load_dialect_impl(dialect)
        return context_.impl.compare_type(inspected_column, _with_type(metadata_column, impl))
    return None  # default comparison


def _with_type(column: Any, type_: Any) -> Any:
    copy = column._copy()
    copy.type = type_
    return copy


#: Days of segments built per statement: a month of a large fleet fits in memory.
SEGMENT_DAYS_PER_BUILD = 31


def rebuild_segments(bind: Any, *, only_stored: bool) -> None:
    """Rebuild ``ledger_hour_segment`` with the service's own builder, a month of days at a time:
    the days that have one (``only_stored``) or every day of ``ledger_hour`` (also when
    ``only_stored`` finds none: segments an earlier migration left out are built).

    The builder reads the columns the code of today puts in a segment; a migration older than one
    adding such a column to ``ledger_hour`` finds it missing and leaves the segments alone — the
    migration that adds the column rebuilds them all (reads fall back to SQL meanwhile). The
    group rollups an earlier migration left out for the same reason are filled first
    (:func:`fill_group_rollups`)."""
    from sqlalchemy import inspect, text

    from service.ledger import segments

    have = {c["name"] for c in inspect(bind).get_columns("ledger_hour")}
    if not set(segments.DIMENSION_COLUMNS) <= have:
        return
    fill_group_rollups(bind, only_if_empty=True)
    first, last = None, None
    if only_stored:
        first, last = bind.execute(
            text("SELECT min(day_index), max(day_index) FROM ledger_hour_segment")
        ).one()
    if first is None:  # every day, or none was stored: an earlier migration skipped them, build all
        first, last = bind.execute(text("SELECT min(day_index), max(day_index) FROM ledger_hour")).one()
    if first is None:
        return
    for lo in range(first, last + 1, SEGMENT_DAYS_PER_BUILD):
        segments.rebuild(bind, lo, min(lo + SEGMENT_DAYS_PER_BUILD - 1, last))


def fill_group_rollups(bind: Any, *, only_if_empty: bool) -> None:
    """Build ``ledger_group_hour``/``ledger_group_day`` for every day of ``ledger_hour`` with the
    service's own rollup (``only_if_empty``: only when they hold nothing though the ledger does).

    Like :func:`rebuild_segments`, skipped while ``ledger_hour`` or the rollups lack a key today's
    code groups by: the migration adding that column calls :func:`rebuild_segments`, which fills
    them then."""
    from sqlalchemy import inspect, text

    from service.ledger import rollups

    inspector = inspect(bind)
    for table in ("ledger_hour", "ledger_group_hour", "ledger_group_day"):
        if not set(rollups.GROUP_KEYS) <= {c["name"] for c in inspector.get_columns(table)}:
            return
    if only_if_empty and bind.execute(text("SELECT 1 FROM ledger_group_day LIMIT 1")).first() is not None:
        return
    first, last = bind.execute(text("SELECT min(day_index), max(day_index) FROM ledger_hour")).one()
    if first is not None:
        rollups.rebuild(bind, first, last)
