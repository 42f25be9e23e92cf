"""The alerts' outbox (service/alerts/outbox.py): an announcement is sent once its receiver takes
it, whatever happened before — a receiver that was down, a process killed after the evaluation
committed — in event order per channel, with a back-off, until it is too old; a channel removed
from the config drops its rows. Sent over real HTTP to a receiver on 127.0.0.1."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import pytest
from alerts.helpers import at_once, silent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_rows import at
from receiver import http_receiver
from sqlalchemy import Engine, select, text, update

from service.alerts import outbox
from service.alerts.engine import AlertConfig, AlertEngine
from service.alerts.metrics import AlertFiringCollector
from service.alerts.rules import parse_alert_tables
from service.db import make_engine, migrate
from service.models import AlertDelivery, AlertEvent, ConnectorState
from service.notify import NotifyError

Put = Callable[[Iterable[Any]], None]
MIN = dt.timedelta(minutes=1)


def _heard_from(engine: Engine, name: str, when: dt.datetime) -> None:
    """The connector ran again: its silence alert resolves at the next evaluation."""
    with engine.begin() as conn:
        conn.execute(
            update(ConnectorState)
            .where(ConnectorState.name == name)
            .values(last_success_at=when, watermark=when)
        )


def _config(url: str, *, channels: bool = True, give_up_after_h: float = 24) -> AlertConfig:
    hook = {"name": "hook", "type": "webhook", "url": url, "retries": 0, "timeout_s": 2}
    hook["give_up_after_h"] = give_up_after_h
    rules, chans = parse_alert_tables(
        "test",
        [
            {
                "name": "silent",
                "kind": "connector_silent",
                "hours": 1,
                "channels": ["hook"] if channels else [],
            }
        ],
        [hook] if channels else [],
        has_smtp=False,
    )
    return AlertConfig(tuple(rules), tuple(chans))


def _received(hooks: Any) -> list[tuple[str, str]]:
    return [(b["subject"], b["state"]) for b in hooks.bodies("/hook")]


def _rows(engine: Engine) -> list[tuple[str, str, int]]:
    with engine.connect() as conn:
        stmt = select(AlertDelivery.channel, AlertDelivery.status, AlertDelivery.attempts).order_by(
            AlertDelivery.event_id
        )
        return [tuple(r) for r in conn.execute(stmt)]  # type: ignore[misc]


def _texts(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(select(AlertEvent.deliveries).order_by(AlertEvent.id)).scalars())


def test_back_off_doubles_from_five_minutes_to_an_hour() -> None:
    assert [outbox.backoff(n) for n in (1, 2, 3, 4, 5, 6, 100)] == [
        dt.timedelta(minutes=m) for m in (5, 10, 20, 40, 60, 60, 60)
    ]


def test_a_process_killed_after_the_commit_loses_nothing(engine: Engine, put: Put) -> None:
    silent(put, "dc1")
    with http_receiver() as hooks:
        config = _config(hooks.base + "/hook")

        def killed(*args: Any, **kwargs: Any) -> None:
            raise SystemExit(137)  # the process dies while sending: nothing after the commit runs

        with pytest.raises(SystemExit):
            AlertEngine(engine, config, post=killed).evaluate(at(2))
        assert _rows(engine) == [("hook", "PENDING", 0)]

        AlertEngine(engine, config).evaluate(at(2) + 5 * MIN)  # another process: the claim still holds
        assert _received(hooks) == []
        AlertEngine(engine, config).evaluate(at(2) + outbox.LEASE)  # the lease ran out
        assert _received(hooks) == [("dc1", "FIRING")]
        AlertEngine(engine, config).evaluate(at(2) + 2 * outbox.LEASE)
        assert _received(hooks) == [("dc1", "FIRING")]  # sent once
    assert _rows(engine) == [("hook", "SENT", 1)]
    assert _texts(engine) == ["hook: SENT"]


def test_a_channel_gets_firing_before_resolved_after_it_was_down(engine: Engine, put: Put) -> None:
    silent(put, "dc1")
    with http_receiver() as hooks:
        alerts = AlertEngine(engine, _config(hooks.base + "/hook"))
        hooks.script = [503]
        alerts.evaluate(at(2))  # fires; the receiver is down: retry after 5 min
        _heard_from(engine, "dc1", at(2))
        alerts.evaluate(at(2) + MIN)  # resolves while the channel backs off: queued behind the firing
        assert hooks.attempts == 1 and _received(hooks) == []
        assert _rows(engine) == [("hook", "PENDING", 1), ("hook", "PENDING", 0)]
        alerts.evaluate(at(2) + 5 * MIN)
        assert _received(hooks) == [("dc1", "FIRING"), ("dc1", "RESOLVED")]
    assert _rows(engine) == [("hook", "SENT", 2), ("hook", "SENT", 1)]


def test_a_send_still_failing_after_a_day_is_given_up(engine: Engine, put: Put) -> None:
    silent(put, "dc1")
    with http_receiver() as hooks:
        alerts = AlertEngine(engine, _config(hooks.base + "/hook"))
        hooks.script = [500] * 100
        now = at(2)
        while now < at(2) + outbox.GIVE_UP_AFTER + outbox.RETRY_MAX:
            alerts.evaluate(now)
            now += 5 * MIN
        # tries at 0, 5, 15, 35, 75 min, then hourly from 135 to 1,395 min: 27 before the day was up
        assert hooks.attempts == 27
        assert _rows(engine) == [("hook", "FAILED", 27)]
        hooks.script = []
        alerts.evaluate(now + outbox.RETRY_MAX)
        assert hooks.attempts == 27  # not tried again
    assert _texts(engine) == [
        f"hook: FAILED (webhook {hooks.base}/…: HTTP 500 (after 1 attempt(s)); "
        "gave up after 27 attempt(s) in 24 h)"
    ]


def test_a_channel_keeps_trying_as_long_as_it_says(engine: Engine, put: Put) -> None:
    """give_up_after_h = 72: a receiver down over a weekend still gets the alert on Monday; = 2:
    given up after two hours, and the history says so."""
    silent(put, "dc1")
    with http_receiver() as hooks:
        alerts = AlertEngine(engine, _config(hooks.base + "/hook", give_up_after_h=72))
        hooks.script = [500] * 100
        now = at(2)
        while now < at(2) + dt.timedelta(hours=60):
            alerts.evaluate(now)
            now += 15 * MIN
        assert _rows(engine) == [("hook", "PENDING", hooks.attempts)] and hooks.attempts > 27
        hooks.script = []
        alerts.evaluate(now + outbox.RETRY_MAX)
        assert _received(hooks) == [("dc1", "FIRING")]
    assert _texts(engine) == ["hook: SENT"]


def test_a_short_give_up_is_said_in_the_history(engine: Engine, put: Put) -> None:
    silent(put, "dc1")
    with http_receiver() as hooks:
        alerts = AlertEngine(engine, _config(hooks.base + "/hook", give_up_after_h=2))
        hooks.script = [500] * 100
        for minutes in (0, 5, 15, 35, 75, 119, 120, 240):
            alerts.evaluate(at(2) + minutes * MIN)
        # tried at 0, 5, 15, 35 and 75 min; at 120 min the two hours are up
        assert hooks.attempts == 5
    assert _rows(engine) == [("hook", "FAILED", 5)]
    assert _texts(engine) == [
        f"hook: FAILED (webhook {hooks.base}/…: HTTP 500 (after 1 attempt(s)); "
        "gave up after 5 attempt(s) in 2 h)"
    ]


def test_a_channel_removed_from_the_config_drops_its_sends(engine: Engine, put: Put) -> None:
    silent(put, "dc1")
    with http_receiver() as hooks:
        hooks.script = [500]
        AlertEngine(engine, _config(hooks.base + "/hook")).evaluate(at(2))
        AlertEngine(engine, _config(hooks.base + "/hook", channels=False)).evaluate(at(3))
        assert hooks.attempts == 1
    assert _rows(engine) == [("hook", "DROPPED", 1)]
    assert _texts(engine) == ["hook: DROPPED (channel no longer configured)"]


@pytest.mark.parametrize("threads", [4])
def test_evaluators_at_once_send_a_pending_announcement_once(engine: Engine, put: Put, threads: int) -> None:
    silent(put, "dc1")
    with http_receiver() as hooks:
        config = _config(hooks.base + "/hook")
        hooks.script = [500]
        AlertEngine(engine, config).evaluate(at(2))
        at_once(threads, lambda: AlertEngine(engine, config).evaluate(at(2) + 5 * MIN))
        assert hooks.attempts == 2 and _received(hooks) == [("dc1", "FIRING")]


def test_the_pending_gauge_counts_unsent_announcements_per_channel(engine: Engine, put: Put) -> None:
    silent(put, "dc1", "dc2")
    with http_receiver() as hooks:
        hooks.script = [500]
        AlertEngine(engine, _config(hooks.base + "/hook")).evaluate(at(2))
    families = {f.name: f for f in AlertFiringCollector(engine).collect()}
    samples = [(s.labels, s.value) for s in families["gpu_ledger_alert_deliveries_pending"].samples]
    assert samples == [({"channel": "hook"}, 2.0)]


# A property over any sequence of evaluations with the receiver up or down: each announcement is
# received at most once, in event order, and everything announced is received once the receiver
# has been up for a whole back-off.
steps = st.lists(st.tuples(st.booleans(), st.integers(min_value=1, max_value=90)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=steps)
def test_any_outage_sequence_delivers_each_announcement_once_in_order(
    tmp_path_factory: pytest.TempPathFactory, plan: list[tuple[bool, int]]
) -> None:
    url = f"sqlite:///{tmp_path_factory.mktemp('outbox')}/ledger.db"
    migrate(url)
    engine = make_engine(url)
    received: list[int] = []
    up = [True]

    def post(url: str, doc: dict[str, Any], **kwargs: Any) -> None:
        if not up[0]:
            raise NotifyError("receiver down")
        received.append(hash((doc["subject"], doc["state"], doc["at"])))

    try:
        with engine.begin() as conn:
            conn.execute(
                ConnectorState.__table__.insert(),  # type: ignore[attr-defined]
                [{"name": "dc1", "type": "x", "status": "OK", "last_success_at": at(0), "watermark": at(0)}],
            )
        alerts = AlertEngine(engine, _config("http://127.0.0.1:9/hook"), post=post)
        now = at(2)
        for i, (receiver_up, minutes) in enumerate(plan):
            up[0] = receiver_up
            if i % 3 == 1:
                _heard_from(engine, "dc1", now)  # resolves at this evaluation …
            elif i % 3 == 2:
                _heard_from(engine, "dc1", at(0))  # … and fires again at the next
            alerts.evaluate(now)
            now += minutes * MIN
        up[0] = True
        alerts.evaluate(now + outbox.RETRY_MAX)
        with engine.connect() as conn:
            events = conn.execute(
                select(AlertEvent.subject, AlertEvent.state, AlertEvent.at)
                .where(AlertEvent.notify)
                .order_by(AlertEvent.id)
            ).all()
        expected = [hash((s, state, when.isoformat())) for s, state, when in events]
        assert received == expected  # each once, in event order, none lost
        assert {status for _, status, _ in _rows(engine)} == {"SENT"}
    finally:
        engine.dispose()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_migration_0018_gives_earlier_events_their_at_as_since_and_no_outbox_rows(
    kind: str, tmp_path: Path, fresh_pg_database: Callable[[], AbstractContextManager[str]]
) -> None:
    with fresh_pg_database() if kind == "postgres" else nullcontext(f"sqlite:///{tmp_path / 'm.db'}") as url:
        migrate(url, "0017")
        engine = make_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO alert_event (rule, subject_key, kind, state, at, subject, unit,"
                        " message, notify, deliveries) VALUES ('s', 'dc1', 'connector_silent', 'FIRING',"
                        " :at, 'dc1', 'h', 'silent', :yes, 'hook: FAILED (HTTP 500)')"
                    ),
                    {"at": at(2), "yes": True},
                )
            migrate(engine)
            with engine.connect() as conn:
                assert conn.execute(select(AlertEvent.since, AlertEvent.at)).one() == (at(2), at(2))
            assert _rows(engine) == []  # what was recorded before is not sent again
        finally:
            engine.dispose()
