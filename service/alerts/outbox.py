"""The alerts' outbox: every announcement's sends, kept until they are sent or too old.

The evaluation writes one ``alert_delivery`` row per announcement and channel in its own
transaction (:func:`enqueue`), then claims what is due (:func:`claim`, still under the evaluation
turn's lock, so two evaluators never claim the same row), commits, sends, and records how each
send went (:func:`settle`). Hence:

* **Nothing is lost.** A receiver that is down, or a process killed after the commit, leaves the
  rows PENDING; a later evaluation sends them. A claim holds its rows for :data:`LEASE`, so a killed
  sender's rows come due again: delivery is at least once (a send the receiver took just before
  the kill is sent again).
* **In order, per channel.** A channel's PENDING rows go in event order, and a channel whose oldest
  row is not due (backing off after a failure) is skipped whole: a receiver never gets an alert's
  RESOLVED before its FIRING.
* **Backing off.** After a failed send (each send already has the channel's own quick retries) the
  channel's rows wait :data:`RETRY_FIRST` × 2^(attempts − 1), at most :data:`RETRY_MAX`; a row still
  unsent its channel's ``give_up_after_h`` (default :data:`GIVE_UP_AFTER`) after its event is
  marked FAILED with its last error. A channel removed from the config DROPS its rows.

``alert_event.deliveries`` (what ``alertHistory`` shows) is rewritten from the rows after each change.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, select, update

from service.alerts.store import Announcement
from service.dbtypes import table_of
from service.models import AlertDelivery, AlertEvent

PENDING, SENT, FAILED, DROPPED = "PENDING", "SENT", "FAILED", "DROPPED"
RETRY_FIRST = dt.timedelta(minutes=5)
RETRY_MAX = dt.timedelta(hours=1)
GIVE_UP_AFTER = dt.timedelta(hours=24)  # a channel's give_up_after_h when it does not say
LEASE = dt.timedelta(minutes=10)  # > delivery.BUDGET_S plus one send's own retries
_OUT, _EVENT = table_of(AlertDelivery), table_of(AlertEvent)


@dataclass(frozen=True)
class Send:
    """One claimed row: send ``announcement`` to the channel named ``channel``."""

    announcement: Announcement
    channel: str


@dataclass(frozen=True)
class Outcome:
    """How one claimed send went. ``tried`` False: not attempted in this evaluation (its channel
    failed earlier in it: ``error`` is that failure; or the time budget was spent)."""

    event_id: int
    channel: str
    sent: bool
    tried: bool = True
    error: str = ""


def backoff(attempts: int) -> dt.timedelta:
    """The wait after the ``attempts``-th failed send in a row (≥ 1)."""
    return min(RETRY_FIRST * 2 ** min(attempts - 1, 16), RETRY_MAX)


def enqueue(
    conn: Connection,
    announcements: Iterable[Announcement],
    channels_of: Mapping[str, Sequence[str]],
    now: dt.datetime,
) -> None:
    """One PENDING row per announcement and channel of its rule, due at ``now``."""
    rows: list[dict[str, Any]] = [
        {"event_id": a.event_id, "channel": name, "position": position, "status": PENDING, "attempts": 0,
         "next_attempt_at": now, "last_error": "", "sent_at": None}
        for a in announcements
        for position, name in enumerate(channels_of.get(a.rule, ()))
    ]  # fmt: skip
    if rows:
        conn.execute(_OUT.insert(), rows)
        refresh(conn, {r["event_id"] for r in rows})


def claim(conn: Connection, now: dt.datetime, give_up_after: Mapping[str, dt.timedelta]) -> list[Send]:
    """What to send now, in event order per channel; held for :data:`LEASE`. ``give_up_after``
    names the configured channels and how long each keeps trying: rows of other channels are
    DROPPED, rows older than their channel's limit FAILED, on the way."""
    stmt = (
        select(_OUT.c.event_id, _OUT.c.channel, _OUT.c.attempts, _OUT.c.next_attempt_at, _OUT.c.last_error,
               *[c for c in _EVENT.c if c.name not in ("id", "notify", "deliveries")])
        .join(_EVENT, _EVENT.c.id == _OUT.c.event_id)
        .where(_OUT.c.status == PENDING)
        .order_by(_OUT.c.channel, _OUT.c.event_id)
    )  # fmt: skip
    by_channel: dict[str, list[Mapping[Any, Any]]] = defaultdict(list)
    for row in conn.execute(stmt).mappings():
        by_channel[row["channel"]].append(row)
    sends: list[Send] = []
    touched: set[int] = set()
    for channel, rows in by_channel.items():
        if channel not in give_up_after:
            _set(
                conn,
                channel,
                [r["event_id"] for r in rows],
                status=DROPPED,
                last_error="channel no longer configured",
            )
            touched.update(r["event_id"] for r in rows)
            continue
        limit = give_up_after[channel]
        expired: dict[str, list[int]] = defaultdict(list)  # last error → events given up
        for r in rows:
            if now - r["at"] >= limit:
                error = r["last_error"] or "never tried: the delivery time budget was spent each time"
                expired[error].append(r["event_id"])
        for error, event_ids in expired.items():
            _set(conn, channel, event_ids, status=FAILED, last_error=error)
            touched.update(event_ids)
        rows = [r for r in rows if now - r["at"] < limit]
        if not rows or rows[0]["next_attempt_at"] > now:
            continue  # backing off (or claimed by a sender that has not settled): the whole channel waits
        _set(conn, channel, [r["event_id"] for r in rows], next_attempt_at=now + LEASE)
        sends += [Send(_announcement(r), channel) for r in rows]
    refresh(conn, touched, give_up_after)
    sends.sort(key=lambda s: s.announcement.event_id)  # event order across channels too
    return sends


def settle(
    conn: Connection,
    outcomes: Sequence[Outcome],
    now: dt.datetime,
    give_up_after: Mapping[str, dt.timedelta] | None = None,
) -> None:
    """Record ``outcomes``: SENT; or a failed send counted and its channel's PENDING rows put
    back by :func:`backoff`; or, not tried, due again at the next evaluation. A few statements per
    channel (rows grouped by what happened to them), not one per row. ``give_up_after`` as for
    :func:`claim` (it words the FAILED rows of the events rewritten)."""
    by_channel: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        by_channel[o.channel].append(o)
    backing_off: list[str] = []
    for channel, group in by_channel.items():
        pending = (_OUT.c.channel == channel) & (_OUT.c.status == PENDING)
        changes: dict[tuple[str, str], list[int]] = defaultdict(list)  # (what happened, error) → events
        for o in group:
            kind = "sent" if o.sent else "failed" if o.tried else "untried"
            changes[(kind, o.error[:2000])].append(o.event_id)
        attempts: int | None = None
        for (kind, error), event_ids in changes.items():
            rows = pending & _OUT.c.event_id.in_(event_ids)
            if kind == "sent":
                values: dict[str, object] = {"status": SENT, "sent_at": now, "attempts": _OUT.c.attempts + 1,
                                             "last_error": ""}  # fmt: skip
            elif kind == "failed":
                values = {"attempts": _OUT.c.attempts + 1, "last_error": error}
            else:  # its channel failed earlier in this evaluation (error), or the time budget ran out
                values = {"next_attempt_at": now, **({"last_error": error} if error else {})}
            conn.execute(update(_OUT).where(rows).values(values))
            if kind == "failed":
                tried = select(func.max(_OUT.c.attempts)).where(rows)
                attempts = max(attempts or 0, int(conn.execute(tried).scalar_one()))
        if attempts is not None:
            conn.execute(update(_OUT).where(pending).values(next_attempt_at=now + backoff(attempts)))
            backing_off.append(channel)
    refresh(conn, {o.event_id for o in outcomes} | _events_of(conn, backing_off), give_up_after)


def pending_by_channel(conn: Connection) -> dict[str, int]:
    """PENDING rows per channel (the ``gpu_ledger_alert_deliveries_pending`` gauge)."""
    stmt = select(_OUT.c.channel, func.count()).where(_OUT.c.status == PENDING).group_by(_OUT.c.channel)
    return {channel: int(n) for channel, n in conn.execute(stmt)}


def refresh(
    conn: Connection, event_ids: Collection[int], give_up_after: Mapping[str, dt.timedelta] | None = None
) -> None:
    """Rewrite ``deliveries`` of ``event_ids`` from their rows, channels in the rule's order; a
    FAILED row says how long its channel tried (``give_up_after``, default :data:`GIVE_UP_AFTER`)."""
    limits = give_up_after or {}
    if not event_ids:
        return
    texts: dict[int, list[str]] = defaultdict(list)
    stmt = (
        select(_OUT).where(_OUT.c.event_id.in_(sorted(event_ids))).order_by(_OUT.c.event_id, _OUT.c.position)
    )
    for r in conn.execute(stmt).mappings():
        limit = limits.get(r["channel"], GIVE_UP_AFTER)
        texts[r["event_id"]].append(f"{r['channel']}: {describe(r, limit)}")
    for event_id, parts in texts.items():
        conn.execute(update(_EVENT).where(_EVENT.c.id == event_id).values(deliveries=", ".join(parts)[:4000]))


def describe(row: Mapping[Any, Any], give_up_after: dt.timedelta = GIVE_UP_AFTER) -> str:
    """One row for a person: ``SENT``, ``PENDING``, ``RETRYING after <UTC> (why; n attempt(s))``,
    ``FAILED (why; gave up after n attempt(s))`` or ``DROPPED (why)``."""
    status, error, attempts = row["status"], row["last_error"], row["attempts"]
    if status == PENDING and error:
        after = row["next_attempt_at"].strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"RETRYING after {after} ({error}; {attempts} attempt(s))"
    if status == FAILED:
        hours = give_up_after.total_seconds() / 3600
        return f"FAILED ({error}; gave up after {attempts} attempt(s) in {hours:g} h)"
    if status == DROPPED:
        return f"DROPPED ({error})"
    return str(status)


def _set(conn: Connection, channel: str, event_ids: Sequence[int], **values: object) -> None:
    conn.execute(
        update(_OUT)
        .where(_OUT.c.channel == channel, _OUT.c.event_id.in_(event_ids), _OUT.c.status == PENDING)
        .values(**values)
    )


def _events_of(conn: Connection, channels: Collection[str]) -> set[int]:
    if not channels:
        return set()
    stmt = select(_OUT.c.event_id).where(_OUT.c.channel.in_(sorted(channels)), _OUT.c.status == PENDING)
    return set(conn.execute(stmt).scalars())


def _announcement(r: Mapping[Any, Any]) -> Announcement:
    return Announcement(
        event_id=r["event_id"], rule=r["rule"], kind=r["kind"], state=r["state"],
        subject_key=r["subject_key"], subject=r["subject"], project=r["project"], team=r["team"],
        value=r["value"], unit=r["unit"], threshold=r["threshold"], message=r["message"],
        since=r["since"], at=r["at"],
    )  # fmt: skip
