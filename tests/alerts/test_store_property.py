"""The announcement rules of service/alerts/store.py as properties, for any sequence of
evaluations of one alert (condition holds or not, hours between evaluations, min interval):

* announcements alternate FIRING, RESOLVED, FIRING… starting with FIRING (a receiver never gets
  a RESOLVED for a firing it did not hear of, nor two FIRINGs in a row);
* two FIRING announcements are at least min_interval_h apart (no flapping);
* and exactly these are announced: the reference model below, the rules as docs/alerts.md states them.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from hypothesis import example, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine
from sqlalchemy.pool import StaticPool
from sqlmodel import SQLModel

from service.alerts import store
from service.alerts.conditions import Finding
from service.dbtypes import table_of
from service.models import AlertEvaluation, AlertEvent, AlertState

T0 = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
FINDING = Finding("k", "subject", Decimal(1), "h", Decimal(1), "holds")

# Short gaps against short intervals: the boundaries (a re-fire exactly min_interval_h later) are hit.
steps = st.lists(st.tuples(st.integers(1, 3), st.booleans()), min_size=1, max_size=30)


def reference(
    evaluations: list[tuple[dt.datetime, bool]], interval: dt.timedelta
) -> list[tuple[dt.datetime, str]]:
    out: list[tuple[dt.datetime, str]] = []
    firing = notified = False
    last: dt.datetime | None = None
    for t, holds in evaluations:
        if holds:
            if not firing:
                firing, notified = True, False
            if not notified and (last is None or t - last >= interval):
                out.append((t, "FIRING"))
                notified, last = True, t
        elif firing:
            if notified:
                out.append((t, "RESOLVED"))
            firing = notified = False
    return out


@settings(max_examples=150, deadline=None)
@given(steps=steps, interval_h=st.integers(0, 5))
@example(steps=[(1, True), (1, False), (1, True)], interval_h=2)  # re-fires exactly 2 h after: announced
def test_announcements(steps: list[tuple[int, bool]], interval_h: int) -> None:
    engine = create_engine("sqlite://", poolclass=StaticPool)
    tables = [table_of(m) for m in (AlertState, AlertEvent, AlertEvaluation)]
    SQLModel.metadata.create_all(engine, tables=tables)
    interval = dt.timedelta(hours=interval_h)
    rule = store.RuleInfo("r", "idle_workload", interval)
    t, evaluations, got = T0, [], []
    for gap_h, holds in steps:
        t += dt.timedelta(hours=gap_h)
        evaluations.append((t, holds))
        with engine.begin() as conn:
            store.take_turn(conn, t)
            got += [(a.at, a.state) for a in store.apply(conn, [rule], {"r": [FINDING] if holds else []}, t)]
    engine.dispose()
    assert got == reference(evaluations, interval)
    assert [s for _, s in got] == ["FIRING", "RESOLVED"] * (len(got) // 2) + ["FIRING"] * (len(got) % 2)
    fires = [at for at, s in got if s == "FIRING"]
    assert all(b - a >= interval for a, b in zip(fires, fires[1:], strict=False))
