"""Reading alerts back: the current state of each alert, and the history of changes.

Scoped like every answer: a project- or team-scoped caller sees the alerts of its projects or
teams only; alerts that belong to no project (``connector_silent``, ``unmonitored_spend``) are
account-wide and need the ``read`` scope. Both lists page by keyset (state: rule and subject;
history: newest first by id).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, false, or_, select, tuple_

from service.analytics.access import Access
from service.analytics.paging import Page
from service.analytics.window import Window
from service.dbtypes import table_of
from service.models import AlertEvent, AlertState

_STATE, _EVENT = table_of(AlertState), table_of(AlertEvent)


@dataclass(frozen=True)
class AlertRow:
    rule: str
    kind: str
    state: str
    subject_key: str
    subject: str
    project: str | None
    team: str | None
    value: Decimal | None
    unit: str
    threshold: Decimal | None
    message: str
    since: dt.datetime
    first_fired_at: dt.datetime
    last_true_at: dt.datetime
    notified: bool


@dataclass(frozen=True)
class EventRow:
    id: int
    rule: str
    kind: str
    state: str
    at: dt.datetime
    subject_key: str
    subject: str
    project: str | None
    team: str | None
    value: Decimal | None
    unit: str
    threshold: Decimal | None
    message: str
    notified: bool
    deliveries: str


def _scope(table: Any, access: Access) -> list[Any]:
    if access.everything:
        return []
    terms = [table.c.project.in_(sorted(access.projects)), table.c.team.in_(sorted(access.teams))]
    return [or_(*terms) if access.projects or access.teams else false()]


def current(
    conn: Connection,
    *,
    access: Access,
    state: str | None = None,
    rule: str | None = None,
    page: Page | None = None,
) -> list[AlertRow]:
    """Alerts as they stand, by rule and subject."""
    page = page or Page()
    t = _STATE
    terms = _scope(t, access)
    if state is not None:
        terms.append(t.c.state == state)
    if rule is not None:
        terms.append(t.c.rule == rule)
    after = page.after_key((str, str))
    if after is not None:
        terms.append(tuple_(t.c.rule, t.c.subject_key) > tuple_(*after))
    stmt = select(t).where(*terms).order_by(t.c.rule, t.c.subject_key)
    if page.fetch is not None:
        stmt = stmt.limit(page.fetch)
    rows = [
        AlertRow(
            **{k: r[k] for k in AlertRow.__dataclass_fields__ if k != "notified"},
            notified=bool(r["notified"]),
        )
        for r in conn.execute(stmt).mappings()
    ]
    page.check(rows)
    return rows


def history(
    conn: Connection,
    window: Window,
    *,
    access: Access,
    state: str | None = None,
    rule: str | None = None,
    page: Page | None = None,
) -> list[EventRow]:
    """Changes (fired, resolved, announced late) in ``window``, newest first."""
    page = page or Page()
    t = _EVENT
    terms = [*_scope(t, access), t.c.at >= window.start, t.c.at < window.end]
    if state is not None:
        terms.append(t.c.state == state)
    if rule is not None:
        terms.append(t.c.rule == rule)
    after = page.after_key((int,))
    if after is not None:
        terms.append(t.c.id < after[0])
    stmt = select(t).where(*terms).order_by(t.c.id.desc())
    if page.fetch is not None:
        stmt = stmt.limit(page.fetch)
    rows = [
        EventRow(
            **{k: r[k] for k in EventRow.__dataclass_fields__ if k != "notified"}, notified=bool(r["notify"])
        )
        for r in conn.execute(stmt).mappings()
    ]
    page.check(rows)
    return rows
