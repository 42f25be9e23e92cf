"""Device inventory and connector health, paged by keyset (device_id order).

A caller scoped to projects/teams sees the devices its projects or teams held: those with a
``ledger_day`` row (every ledger hour is in its day's rollup) whose project or team it may read,
at any time. Devices it never held, idle ones included, are not shown. Connector health is
account-wide (it names billing accounts and sources): it needs ``read``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Connection, func, or_, select

from service.analytics.access import Access
from service.analytics.errors import InvalidArgument, PageSizeTooLarge
from service.analytics.window import DAY_TABLE, access_conditions
from service.dbtypes import table_of
from service.models import ConnectorRun, ConnectorState, Device

#: DeviceFilter keys → ``device`` columns.
DEVICE_FILTER_COLUMNS = (
    "device_id",
    "environment",
    "provider",
    "account",
    "region",
    "cluster",
    "node",
    "gpu_model",
    "instance_type",
    "vendor",
    "source",
)

#: Columns a ``search`` text is looked for in (case-insensitive substring): what a person types to
#: find a GPU — part of its id, its host, instance, site, account, type, model or connector.
SEARCH_COLUMNS = (
    "device_id",
    "node",
    "instance_id",
    "cluster",
    "region",
    "account",
    "instance_type",
    "gpu_model",
    "source",
)
SEARCH_MAX_CHARS = 200


def encode_cursor(device_id: str) -> str:
    return base64.urlsafe_b64encode(device_id.encode()).decode()


def decode_cursor(cursor: str) -> str:
    try:
        device_id = base64.b64decode(cursor.encode(), altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeError, ValueError):
        device_id = ""
    if not device_id or encode_cursor(device_id) != cursor:
        raise InvalidArgument(f"cursor {cursor!r} is not one this API handed out")
    return device_id


@dataclass(frozen=True)
class DevicePage:
    devices: list[Device]
    has_next_page: bool
    total_count: int


def devices_page(
    conn: Connection,
    filters: Mapping[str, Sequence[str]],
    *,
    access: Access,
    first: int,
    after: str | None,
    page_size_max: int,
    search: str | None = None,
) -> DevicePage:
    """Up to ``first`` devices ``access`` may see after the cursor, ordered by device_id; with
    ``search``, only those with it in one of :data:`SEARCH_COLUMNS` (``%`` and ``_`` are literal).

    ``first`` above ``page_size_max`` is an error rather than silently clamped: a client that asked
    for 1,000 and got 500 without being told would under-count.
    """
    if first < 0:
        raise InvalidArgument(f"first must not be negative (got {first})")
    if first > page_size_max:
        raise PageSizeTooLarge(f"first={first} is above the page size limit of {page_size_max}")
    table = table_of(Device)
    terms: list[ColumnElement[bool]] = [table.c[k].in_(list(v)) for k, v in filters.items() if v]
    if search:
        if len(search) > SEARCH_MAX_CHARS:
            raise InvalidArgument(f"search is {len(search)} characters long; at most {SEARCH_MAX_CHARS}")
        # lower() on both sides: LIKE is case-sensitive on PostgreSQL, not on SQLite.
        needle = search.lower()
        terms.append(or_(*(func.lower(table.c[c]).contains(needle, autoescape=True) for c in SEARCH_COLUMNS)))
    if not access.everything:
        held = select(DAY_TABLE.c.device_id).where(*access_conditions(DAY_TABLE, access)).distinct()
        terms.append(table.c.device_id.in_(held))
    total = conn.execute(select(func.count()).select_from(table).where(*terms)).scalar_one()
    stmt = select(table).where(*terms).order_by(table.c.device_id).limit(first + 1)
    if after is not None:
        stmt = stmt.where(table.c.device_id > decode_cursor(after))
    rows = conn.execute(stmt).all()
    devices = [Device.model_validate(dict(r._mapping)) for r in rows[:first]]
    return DevicePage(devices, len(rows) > first, int(total))


def connector_states(conn: Connection, access: Access) -> list[ConnectorState]:
    access.require_everything("connectors")
    table = table_of(ConnectorState)
    rows = conn.execute(select(table).order_by(table.c.name)).all()
    return [ConnectorState.model_validate(dict(r._mapping)) for r in rows]


def last_run_findings(conn: Connection) -> dict[str, int]:
    """Connector name → data-quality findings of its last finished run (connectors that have one).

    Not guarded: callers guard it with :func:`connector_states` (the CLI reads the database
    itself)."""
    runs = table_of(ConnectorRun)
    last = (
        select(func.max(runs.c.id))
        .where(runs.c.finished_at.is_not(None))
        .group_by(runs.c.connector)
        .scalar_subquery()
    )
    found = conn.execute(select(runs.c.connector, runs.c.findings).where(runs.c.id.in_(last)))
    return {str(name): int(n) for name, n in found}
