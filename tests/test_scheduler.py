"""The scheduler against a real database, an in-test connector and an in-test ingest function."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from typing import Any

from fake_connectors import FakeMetrics, fake_registry
from sqlalchemy import Engine

from connectors.base import ConfigurationError, ConnectorStatus, RetriableError
from service.db import session_scope
from service.models import ConnectorState
from service.scheduler import Scheduler, backoff_s, billing_window, catch_up_window, sync_connector_states
from service.telemetry import Telemetry

UTC = dt.UTC
NOW = dt.datetime(2025, 9, 10, 12, 34, 56, tzinfo=UTC)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: dt.datetime):
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


class Ingest:
    """Stands in for ingest_window: records calls, moves the watermark, fails on request."""

    def __init__(self, failures: list[Exception] | None = None):
        self.calls: list[tuple[str, dt.datetime, dt.datetime, dict[str, Any]]] = []
        self.failures = list(failures or [])
        self.called = threading.Event()

    def __call__(
        self, engine: Engine, name: str, connector: Any, start: dt.datetime, end: dt.datetime, **kw: Any
    ):
        self.calls.append((name, start, end, kw))
        self.called.set()
        if self.failures:
            raise self.failures.pop(0)
        with session_scope(engine) as session:
            state = session.get(ConnectorState, name)
            assert state is not None
            state.watermark, state.status = end, ConnectorStatus.OK
            session.add(state)
        return type("Result", (), {"status": "OK", "ledger_rows": 3})()


def _configs(*tables: dict[str, Any]) -> list[Any]:
    reg = fake_registry()
    return [reg.validate({"type": "fake", **t}) for t in tables]


def _state(engine: Engine, name: str) -> ConnectorState:
    with session_scope(engine) as session:
        state = session.get(ConnectorState, name)
        assert state is not None
        return state


async def _wait_for(predicate: Any, timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def test_backoff_doubles_and_caps() -> None:
    assert [backoff_s(n, 10, 900) for n in (1, 2, 3, 4, 7, 8, 20)] == [10, 20, 40, 80, 640, 900, 900]


def test_sync_connector_states(engine: Engine) -> None:
    configs = _configs({"name": "a"}, {"name": "b", "enabled": False}, {"name": "c"})
    sync_connector_states(engine, configs, errors={"c": "bad token"})
    assert _state(engine, "a").status == ConnectorStatus.NEVER_RUN
    assert _state(engine, "b").status == ConnectorStatus.DISABLED
    assert (_state(engine, "c").status, _state(engine, "c").last_error) == (
        "INVALID_CONFIGURATION",
        "bad token",
    )
    # re-enabled later: back to NEVER_RUN (it never ran), the row is kept
    sync_connector_states(engine, _configs({"name": "b"}))
    assert _state(engine, "b").status == ConnectorStatus.NEVER_RUN


def test_catch_up_window(engine: Engine) -> None:
    conn = FakeMetrics(_configs({"name": "a"})[0], presence_gap_s=1800)
    sync_connector_states(engine, _configs({"name": "a"}))
    # no watermark: backfill from now − backfill_days, floored; end = now ceiled
    assert catch_up_window(engine, "a", conn, NOW, 2) == (
        dt.datetime(2025, 9, 8, 12, tzinfo=UTC),
        dt.datetime(2025, 9, 10, 13, tzinfo=UTC),
    )
    with session_scope(engine) as session:
        state = session.get(ConnectorState, "a")
        assert state is not None
        state.watermark = dt.datetime(2025, 9, 10, 10, 0, tzinfo=UTC)
        session.add(state)
    # watermark − presence gap (30 min) − 1 h = 08:30, floored to 08:00
    assert catch_up_window(engine, "a", conn, NOW, 2)[0] == dt.datetime(2025, 9, 10, 8, tzinfo=UTC)


def test_runs_enabled_metrics_connectors_on_their_interval(engine: Engine) -> None:
    configs = _configs(
        {"name": "a", "interval_s": 0.02, "backfill_days": 1},
        {"name": "off", "enabled": False},
    )
    ingest, clock, telemetry = Ingest(), Clock(NOW), Telemetry()
    sched = Scheduler(
        engine,
        configs,
        registry=fake_registry(),
        ingest=ingest,
        clock=clock,
        telemetry=telemetry,
        idle_threshold_pct=7.5,
        sites=["site"],
    )

    async def scenario() -> None:
        await sched.start()
        assert _state(engine, "off").status == ConnectorStatus.DISABLED
        await _wait_for(lambda: len(ingest.calls) >= 1)
        clock.now = NOW + dt.timedelta(hours=2)
        await _wait_for(lambda: any(c[2] > NOW + dt.timedelta(hours=1) for c in ingest.calls))
        await sched.stop()

    asyncio.run(scenario())
    assert {c[0] for c in ingest.calls} == {"a"}
    name, start, end, kw = ingest.calls[0]
    assert (start, end) == (dt.datetime(2025, 9, 9, 12, tzinfo=UTC), dt.datetime(2025, 9, 10, 13, tzinfo=UTC))
    assert kw == {"sites": ("site",), "idle_threshold_pct": 7.5, "after_ingest": None}
    later = [c for c in ingest.calls if c[2] == dt.datetime(2025, 9, 10, 15, tzinfo=UTC)][0]
    # from the watermark 13:00 − presence gap 1 h − 1 h
    assert later[1] == dt.datetime(2025, 9, 10, 11, tzinfo=UTC)
    assert _state(engine, "a").status == ConnectorStatus.OK
    assert telemetry.registry.get_sample_value(
        "gpu_ledger_ingest_runs_total", {"connector": "a", "status": "OK"}
    )
    assert telemetry.registry.get_sample_value("gpu_ledger_ingest_rows_total", {"connector": "a"}) >= 3


def test_retriable_errors_back_off_then_recover(engine: Engine) -> None:
    configs = _configs({"name": "a", "interval_s": 60})
    ingest = Ingest(failures=[RetriableError("HTTP 503"), RetriableError("HTTP 503")])
    sched = Scheduler(
        engine,
        configs,
        registry=fake_registry(),
        ingest=ingest,
        clock=Clock(NOW),
        retry_base_s=0.02,
        backoff_cap_s=0.05,
    )
    seen: list[str] = []

    async def scenario() -> None:
        await sched.start()
        await _wait_for(lambda: len(ingest.calls) >= 1)
        await _wait_for(lambda: _state(engine, "a").status != ConnectorStatus.NEVER_RUN)
        seen.append(_state(engine, "a").status)
        await _wait_for(lambda: len(ingest.calls) >= 3)
        await _wait_for(lambda: _state(engine, "a").status == ConnectorStatus.OK)
        await sched.stop()

    asyncio.run(scenario())
    assert seen == [ConnectorStatus.FAILED_CONNECTION]
    assert len(ingest.calls) == 3  # two failures retried quickly, then the 60 s interval
    assert "HTTP 503" in (_state(engine, "a").last_error or "")


def test_configuration_error_stops_that_connector_only(engine: Engine) -> None:
    configs = _configs({"name": "bad", "interval_s": 0.01}, {"name": "good", "interval_s": 0.01})

    class PerName(Ingest):
        def __call__(self, engine: Engine, name: str, *a: Any, **kw: Any) -> Any:
            if name == "bad":
                self.calls.append((name, *a[1:3], kw))
                raise ConfigurationError("region 'mars-1' does not exist")
            return super().__call__(engine, name, *a, **kw)

    ingest = PerName()
    sched = Scheduler(engine, configs, registry=fake_registry(), ingest=ingest, clock=Clock(NOW))

    async def scenario() -> None:
        await sched.start()
        await _wait_for(lambda: sum(c[0] == "good" for c in ingest.calls) >= 3)
        await sched.stop()

    asyncio.run(scenario())
    assert sum(c[0] == "bad" for c in ingest.calls) == 1
    assert sched.stopped == {"bad": ConnectorStatus.INVALID_CONFIGURATION}
    state = _state(engine, "bad")
    assert state.status == ConnectorStatus.INVALID_CONFIGURATION and "mars-1" in (state.last_error or "")


def test_billing_connectors_import_from_the_previous_month(engine: Engine) -> None:
    reg = fake_registry()
    configs = [reg.validate({"name": "bills", "type": "fakebill", "path": "/x", "backfill_days": 90})]
    metrics, bills = Ingest(), Ingest()
    sched = Scheduler(engine, configs, registry=reg, ingest=metrics, ingest_billing=bills, clock=Clock(NOW))

    async def scenario() -> None:
        await sched.start()
        await _wait_for(lambda: len(bills.calls) == 1)
        await sched.stop()

    asyncio.run(scenario())
    assert metrics.calls == []
    # First run: backfill_days (90) reaches further back than the previous month's first day.
    name, start, end, _ = bills.calls[0]
    assert (name, start, end) == ("bills", NOW - dt.timedelta(days=90), NOW)
    assert billing_window(NOW, 90, first_run=False) == (dt.datetime(2025, 8, 1, tzinfo=UTC), NOW)
    january = dt.datetime(2026, 1, 5, tzinfo=UTC)
    assert billing_window(january, 1, first_run=False)[0] == dt.datetime(2025, 12, 1, tzinfo=UTC)


def test_stop_waits_for_a_running_ingest(engine: Engine) -> None:
    release = threading.Event()

    class Slow(Ingest):
        def __call__(self, *a: Any, **kw: Any) -> Any:
            self.called.set()
            release.wait(5)
            return super().__call__(*a, **kw)

    ingest = Slow()
    sched = Scheduler(
        engine, _configs({"name": "a"}), registry=fake_registry(), ingest=ingest, clock=Clock(NOW)
    )

    async def scenario() -> None:
        await sched.start()
        await _wait_for(ingest.called.is_set)
        stopping = asyncio.create_task(sched.stop())
        await asyncio.sleep(0.05)
        assert not stopping.done()
        release.set()
        await stopping

    asyncio.run(scenario())
    assert _state(engine, "a").watermark == dt.datetime(2025, 9, 10, 13, tzinfo=UTC)
