"""Alert state in the database: FIRING/RESOLVED per (rule, subject), announcements, history.

One evaluation is one transaction that first updates the ``alert_evaluation`` row
(:func:`take_turn`): that row's lock makes evaluations of several processes (``serve --workers``,
a second ``serve``, an ``ingest`` beside them) take turns on PostgreSQL and SQLite alike, so two
of them never both see an alert RESOLVED and both announce it firing.

What is announced (sent to the rule's channels), per (rule, subject):

* **fires** — the condition holds and the alert was RESOLVED or new: state FIRING, one history row.
  It is announced at once unless a firing of the same alert was announced less than
  ``min_interval_h`` ago (flapping); then it is held back and announced at the first evaluation
  after the interval has passed, if it still fires (a history row says so).
* **still firing** — nothing is written but ``last_true_at``, value and message: never announced twice.
* **resolves** — the condition no longer holds: state RESOLVED, one history row, announced only
  if its firing was (a receiver never gets a "resolved" for a firing it never heard of).
* A rule removed from the config: its firing alerts resolve, unannounced.

At most :data:`MAX_ANNOUNCEMENTS` announcements per rule and evaluation: the rest stay FIRING
unannounced and go out at the next evaluations (a fleet of a thousand idle notebooks must not
send a thousand e-mails at once).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from sqlalchemy import Connection, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from service.dbtypes import table_of
from service.models import AlertEvaluation, AlertEvent, AlertState

if TYPE_CHECKING:
    from service.alerts.conditions import Finding

FIRING, RESOLVED = "FIRING", "RESOLVED"
MAX_ANNOUNCEMENTS = 50
_STATE, _EVENT, _TURN = table_of(AlertState), table_of(AlertEvent), table_of(AlertEvaluation)


@dataclass(frozen=True)
class RuleInfo:
    """What the store needs of a rule."""

    name: str
    kind: str
    min_interval: dt.timedelta


@dataclass(frozen=True)
class Announcement:
    """A history row to send to the rule's channels (after the transaction commits)."""

    event_id: int
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
    at: dt.datetime


def take_turn(conn: Connection, now: dt.datetime) -> None:
    """Lock the evaluation row for this transaction (created on first use): evaluators queue here."""
    values = {"id": 1, "evaluated_at": now, "evaluations": 1}
    insert = pg_insert(_TURN) if conn.dialect.name == "postgresql" else sqlite_insert(_TURN)
    conn.execute(
        insert.values(values).on_conflict_do_update(
            index_elements=[_TURN.c.id],
            set_={"evaluated_at": now, "evaluations": _TURN.c.evaluations + 1},
        )
    )


def _event(
    conn: Connection, state: Mapping[str, object], new_state: str, notify: bool, now: dt.datetime
) -> int:
    row = {
        k: state[k]
        for k in (
            "rule",
            "subject_key",
            "kind",
            "subject",
            "project",
            "team",
            "value",
            "unit",
            "threshold",
            "message",
            "since",
        )
    }
    result = conn.execute(
        _EVENT.insert().values(**row, state=new_state, at=now, notify=notify, deliveries="")
    )
    return int(result.inserted_primary_key[0])  # type: ignore[index]


def _announcement(
    event_id: int, state: Mapping[str, object], new_state: str, now: dt.datetime
) -> Announcement:
    return Announcement(
        event_id=event_id,
        rule=str(state["rule"]),
        kind=str(state["kind"]),
        state=new_state,
        subject_key=str(state["subject_key"]),
        subject=str(state["subject"]),
        project=state["project"],  # type: ignore[arg-type]
        team=state["team"],  # type: ignore[arg-type]
        value=state["value"],  # type: ignore[arg-type]
        unit=str(state["unit"]),
        threshold=state["threshold"],  # type: ignore[arg-type]
        message=str(state["message"]),
        since=state["since"],  # type: ignore[arg-type]
        at=now,
    )


def apply(
    conn: Connection,
    rules: Sequence[RuleInfo],
    findings: Mapping[str, Sequence[Finding]],
    now: dt.datetime,
) -> list[Announcement]:
    """Move every alert of the rules in ``findings`` (rule name → what holds now) to its new state.

    Rules absent from ``findings`` (their condition could not be computed) keep their state; alerts
    of rules no longer in ``rules`` resolve unannounced. Returns what to announce."""
    by_name = {r.name: r for r in rules}
    current = {(r["rule"], r["subject_key"]): dict(r) for r in conn.execute(select(_STATE)).mappings()}
    out: list[Announcement] = []
    for rule_name, found in findings.items():
        rule = by_name[rule_name]
        budget = MAX_ANNOUNCEMENTS
        holding = {f.subject_key: f for f in found}
        for finding in found:
            key = (rule.name, finding.subject_key)
            old = current.get(key)
            fresh = {
                "rule": rule.name,
                "subject_key": finding.subject_key,
                "kind": rule.kind,
                "subject": finding.subject[:600],
                "project": finding.project,
                "team": finding.team,
                "value": finding.value,
                "unit": finding.unit,
                "threshold": finding.threshold,
                "message": finding.message,
                "last_true_at": now,
            }
            if old is None or old["state"] == RESOLVED:
                state = {
                    **fresh,
                    "state": FIRING,
                    "since": now,
                    "first_fired_at": old["first_fired_at"] if old else now,
                    "notified": False,
                    "last_fire_notified_at": old["last_fire_notified_at"] if old else None,
                }
            else:
                state = {**old, **fresh}
            last = state["last_fire_notified_at"]
            announce = (
                not state["notified"] and budget > 0 and (last is None or now - last >= rule.min_interval)  # type: ignore[operator]
            )
            if announce:
                budget -= 1
                state["notified"], state["last_fire_notified_at"] = True, now
            if old is None or old["state"] == RESOLVED or announce:
                event_id = _event(conn, state, FIRING, announce, now)
                if announce:
                    out.append(_announcement(event_id, state, FIRING, now))
            _save(conn, state, exists=old is not None)
        for key, old in current.items():
            if key[0] != rule.name or old["state"] != FIRING or key[1] in holding:
                continue
            state = {**old, "state": RESOLVED, "since": now, "notified": False}
            event_id = _event(conn, state, RESOLVED, bool(old["notified"]), now)
            if old["notified"]:
                out.append(_announcement(event_id, state, RESOLVED, now))
            _save(conn, state, exists=True)
    for key, old in current.items():
        if key[0] not in by_name and old["state"] == FIRING:
            state = {
                **old,
                "state": RESOLVED,
                "since": now,
                "notified": False,
                "message": "rule removed from the config",
            }
            _event(conn, state, RESOLVED, False, now)
            _save(conn, state, exists=True)
    return out


def _save(conn: Connection, state: Mapping[str, object], *, exists: bool) -> None:
    if exists:
        conn.execute(
            update(_STATE)
            .where(_STATE.c.rule == state["rule"], _STATE.c.subject_key == state["subject_key"])
            .values({k: v for k, v in state.items() if k not in ("rule", "subject_key")})
        )
    else:
        conn.execute(_STATE.insert().values(**state))


def firing(conn: Connection) -> list[tuple[str, str, str]]:
    """(rule, kind, subject) of every firing alert, for the Prometheus gauge."""
    stmt = select(_STATE.c.rule, _STATE.c.kind, _STATE.c.subject).where(_STATE.c.state == FIRING)
    return [(r, k, s) for r, k, s in conn.execute(stmt)]
