"""Runs every enabled connector on its own interval inside ``serve``.

Each connector has one asyncio task. A run computes its window, then calls ``ingest_window``
(metrics: from the watermark) or ``ingest_billing`` (billing: from the first day of the previous
month, since providers restate a month's bill until it closes; re-importing a billing period
replaces it exactly) in a worker thread (both are synchronous and database-bound). What happens after an
error is what ``service.failures.classify`` says, as for the run's own status: a configuration
error stops that connector until the config is fixed, ``FatalSourceError`` stops it until someone
looks, a source out of reach (``RetriableError``, network or database trouble) is retried with
exponential backoff capped at ``backoff_cap_s``, and bad data or a bug (``INTERNAL_ERROR``, logged
with its traceback) waits for the next regular run. The run recorder writes the status of a run;
the scheduler writes it again for a failure before or around the run (computing the window).
A billing run that ends ``DEGRADED`` (imported, but too much refused) is no failure to retry: the
next run comes at the regular interval.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from sqlalchemy import Engine
from sqlmodel import select

from connectors.registry import Registry, default_registry
from connectors.sdk import ConnectorConfig, ConnectorError, ConnectorStatus, close_connector
from service.db import session_scope
from service.failures import Failure, NextStep, classify, log_traceback_once
from service.ledger import version as ledger_version
from service.logging import get_logger
from service.models import ConnectorState
from service.telemetry import Telemetry, utc_now
from service.timeutil import as_utc, ceil_hour, floor_hour

log = get_logger(__name__)

BACKOFF_CAP_S = 900.0
RETRY_BASE_S = 10.0
IngestFn = Callable[..., Any]
_NEXT_STEP: dict[NextStep, str] = {
    "stop": "stopped until the operator acts",
    "retry": "will retry",
    "wait": "next regular run",
}


def _default_ingest(*args: Any, **kwargs: Any) -> Any:
    from service.ledger.ingest import ingest_window  # the ledger package imports polars: only when used

    return ingest_window(*args, **kwargs)


def _default_ingest_billing(*args: Any, **kwargs: Any) -> Any:
    from service.billing.ingest import ingest_billing

    return ingest_billing(*args, **kwargs)


def _default_ingest_facts(*args: Any, **kwargs: Any) -> Any:
    from service.facts_ingest import ingest_facts

    return ingest_facts(*args, **kwargs)


def billing_window(
    now: dt.datetime, backfill_days: float, first_run: bool
) -> tuple[dt.datetime, dt.datetime]:
    """What a billing connector's next run imports: from the first day of the previous month
    (still being restated) — or ``backfill_days`` back on the first run, if that is earlier — to now."""
    month = dt.datetime(now.year, now.month, 1, tzinfo=dt.UTC)
    previous = (month - dt.timedelta(days=1)).replace(day=1)
    start = min(previous, now - dt.timedelta(days=backfill_days)) if first_run else previous
    return start, now


def catch_up_window(
    engine: Engine, name: str, connector: Any, now: dt.datetime, backfill_days: float
) -> tuple[dt.datetime, dt.datetime]:
    """The window the next run of ``name`` ingests: hour-aligned ``[start, end)``.

    With a watermark, ``start`` reaches back ``presence_gap + 1 h`` before it (late samples and
    devices whose presence spans the watermark are re-read; re-ingesting is idempotent); without
    one, ``backfill_days`` before ``now``. ``end`` is ``now`` rounded up to the hour.
    """
    with session_scope(engine) as session:
        state = session.get(ConnectorState, name)
        watermark = state.watermark if state is not None else None
    presence_gap = dt.timedelta(
        seconds=getattr(getattr(connector, "sampling", None), "presence_gap_s", 3600.0)
    )
    if watermark is not None:
        start = floor_hour(as_utc(watermark) - presence_gap - dt.timedelta(hours=1))
    else:
        start = floor_hour(as_utc(now) - dt.timedelta(days=backfill_days))
    return start, ceil_hour(now)


def _never_succeeded(engine: Engine, name: str) -> bool:
    with session_scope(engine) as session:
        state = session.get(ConnectorState, name)
        return state is None or state.last_success_at is None


def backoff_s(failures: int, base_s: float = RETRY_BASE_S, cap_s: float = BACKOFF_CAP_S) -> float:
    """Seconds to wait after the ``failures``-th consecutive failure (1, 2, …): doubling, capped."""
    return min(cap_s, base_s * 2 ** max(0, failures - 1))


def sync_connector_states(
    engine: Engine, configs: Iterable[ConnectorConfig], errors: Mapping[str, str] = {}
) -> None:
    """Make sure every configured connector has a ``connector_state`` row the API can list.

    New rows start ``NEVER_RUN`` (``DISABLED`` when ``enabled = false``); ``errors`` (name →
    message) marks connectors that could not be built ``INVALID_CONFIGURATION``.
    """
    with session_scope(engine) as session:
        existing = {s.name: s for s in session.exec(select(ConnectorState)).all()}
        for config in configs:
            state = existing.get(config.name) or ConnectorState(
                name=config.name, type=config.type, status=ConnectorStatus.NEVER_RUN
            )
            state.type = config.type
            if not config.enabled:
                state.status = ConnectorStatus.DISABLED
            elif config.name in errors:
                state.status, state.last_error = ConnectorStatus.INVALID_CONFIGURATION, errors[config.name]
            elif state.status in (ConnectorStatus.DISABLED, ConnectorStatus.INVALID_CONFIGURATION):
                state.status = ConnectorStatus.NEVER_RUN if state.last_run_at is None else ConnectorStatus.OK
            session.add(state)
        ledger_version.bump_session(session)  # the `connectors` answer changes


def _record_failure(engine: Engine, name: str, status: ConnectorStatus, error: str, now: dt.datetime) -> None:
    with session_scope(engine) as session:
        state = session.get(ConnectorState, name)
        if state is None:
            return
        state.status, state.last_error, state.last_run_at = status, error[:4000], now
        session.add(state)
        ledger_version.bump_session(session)


class Scheduler:
    """Ingests every enabled metrics connector of ``configs`` every ``interval_s`` seconds.

    ``connectors`` (name → instance) replaces building them from the registry; ``ingest``
    replaces ``service.ledger.ingest.ingest_window``; ``clock`` gives "now" — all for tests.
    """

    def __init__(
        self,
        engine: Engine,
        configs: Iterable[ConnectorConfig],
        *,
        sites: Iterable[Any] = (),
        idle_threshold_pct: float = 5.0,
        attribution_rules: Iterable[Any] = (),
        connectors: Mapping[str, Any] | None = None,
        registry: Registry | None = None,
        ingest: IngestFn = _default_ingest,
        ingest_billing: IngestFn = _default_ingest_billing,
        ingest_facts: IngestFn = _default_ingest_facts,
        catalog: Any = None,
        gpu_cost_share: Any = 1,
        after_ingest: Any = None,
        jobs: Iterable[Any] = (),
        after_run: Callable[[dt.datetime], object] | None = None,
        clock: Callable[[], dt.datetime] = utc_now,
        telemetry: Telemetry | None = None,
        retry_base_s: float = RETRY_BASE_S,
        backoff_cap_s: float = BACKOFF_CAP_S,
    ):
        self.engine, self.configs = engine, list(configs)
        self.sites, self.idle_threshold_pct = tuple(sites), idle_threshold_pct
        self.attribution_rules = tuple(attribution_rules)  # [[attribution]], docs/attribution.md
        self._given, self._registry = dict(connectors or {}), registry
        self.ingest, self.clock, self.telemetry = ingest, clock, telemetry
        self.ingest_billing, self.catalog, self.gpu_cost_share = ingest_billing, catalog, gpu_cost_share
        self.ingest_facts = ingest_facts  # facts connectors (slurm): service.facts_ingest
        self.after_ingest, self.after_run = after_ingest, after_run
        self.retry_base_s, self.backoff_cap_s = retry_base_s, backoff_cap_s
        # Periodic work of the one scheduling process (scheduled reports): each has ``name``,
        # ``interval_s`` and a synchronous ``run()``.
        self.jobs = list(jobs)
        self._stop = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.stopped: dict[str, ConnectorStatus] = {}  # connectors that gave up, and why

    def _build(self) -> tuple[dict[str, Any], dict[str, str]]:
        built, errors = {}, {}
        for config in self.configs:
            if not config.enabled:
                continue
            try:
                built[config.name] = self._given.get(config.name) or (
                    self._registry or default_registry()
                ).build(config)
            except ConnectorError as exc:
                errors[config.name] = f"{type(exc).__name__}: {exc}"
        return built, errors

    async def start(self) -> None:
        """Record every connector's state and start one task per enabled metrics connector."""
        built, errors = self._build()
        await asyncio.to_thread(sync_connector_states, self.engine, self.configs, errors)
        for name, message in errors.items():
            log.error("connector cannot be built", connector=name, error=message)
        for config in self.configs:
            connector = built.get(config.name)
            if connector is None:
                continue
            if getattr(connector, "kind", None) not in ("metrics", "billing", "facts"):
                log.info("connector not scheduled: neither metrics, billing nor facts", connector=config.name)
                continue
            self._tasks[config.name] = asyncio.create_task(self._loop(config, connector), name=config.name)
        for job in self.jobs:
            self._tasks[f"job:{job.name}"] = asyncio.create_task(self._job_loop(job), name=f"job:{job.name}")

    async def stop(self, timeout_s: float = 30.0) -> None:
        """Let running ingests finish (up to ``timeout_s``), then cancel what is left."""
        self._stop.set()
        tasks = list(self._tasks.values())
        if not tasks:
            return
        _done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` or until stopped; True when it is time to stop."""
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)
        except TimeoutError:
            return False
        return True

    async def _job_loop(self, job: Any) -> None:
        """``job.run()`` in a worker thread every ``job.interval_s`` until stopped; a failure is
        logged and the next run comes at the usual time."""
        while not self._stop.is_set():
            try:
                await asyncio.to_thread(job.run)
            except Exception:  # noqa: BLE001  (a job's bug must not stop the connectors' scheduler)
                log.exception("scheduled job failed", job=job.name)
            if await self._sleep(job.interval_s):
                return

    async def _loop(self, config: ConnectorConfig, connector: Any) -> None:
        try:
            failures = 0
            while not self._stop.is_set():
                outcome = await self.run_once(config, connector)
                if outcome == "stop":
                    return
                # Only a source out of reach is retried early; bad data and bugs wait for the
                # next regular run (a quick retry would read the same data or hit the same bug).
                failures = failures + 1 if outcome == "retry" else 0
                delay = (
                    backoff_s(failures, self.retry_base_s, self.backoff_cap_s)
                    if failures
                    else config.interval_s
                )
                if await self._sleep(delay):
                    return
        finally:
            close_connector(connector)

    async def run_once(self, config: ConnectorConfig, connector: Any) -> Literal["ok", NextStep]:
        """One ingest of ``config.name``'s catch-up window, then ``after_run`` (the alert rules,
        service.alerts.engine: after a failure too, so a silent connector is seen), and what the
        loop does next."""
        outcome = await self._run_once(config, connector)
        if self.after_run is not None:
            await asyncio.to_thread(self.after_run, self.clock())
        return outcome

    async def _run_once(self, config: ConnectorConfig, connector: Any) -> Literal["ok", NextStep]:
        name, now = config.name, self.clock()
        try:
            kind = getattr(connector, "kind", None)
            ingest: IngestFn
            options: dict[str, Any]
            if kind == "billing":
                first_run = await asyncio.to_thread(_never_succeeded, self.engine, name)
                start, end = billing_window(now, config.backfill_days, first_run)
                ingest = self.ingest_billing
                options = {"catalog": self.catalog, "gpu_cost_share": self.gpu_cost_share}
            else:
                start, end = await asyncio.to_thread(
                    catch_up_window, self.engine, name, connector, now, config.backfill_days
                )
                if kind == "facts":
                    ingest, options = self.ingest_facts, {}
                else:
                    ingest = self.ingest
                    options = {
                        "sites": self.sites,
                        "idle_threshold_pct": self.idle_threshold_pct,
                        "after_ingest": self.after_ingest,
                    }
            # only when configured: an ingest function given for a test need not know it
            if self.attribution_rules:
                options["attribution_rules"] = self.attribution_rules
            result = await asyncio.to_thread(ingest, self.engine, name, connector, start, end, **options)
        except Exception as exc:  # noqa: BLE001  (classified: every failure has its next step)
            failure = classify(exc)
            if failure.next_step == "stop":
                self.stopped[name] = failure.status
            await self._failed(name, exc, now, failure)
            return failure.next_step
        status = str(getattr(result, "status", ConnectorStatus.OK))
        rows = getattr(result, "ledger_rows", None)
        if self.telemetry is not None:
            self.telemetry.ingest_runs.labels(name, status).inc()
            if isinstance(rows, int):
                self.telemetry.ingest_rows.labels(name).inc(rows)
        log.info(
            "ingest done",
            connector=name,
            status=status,
            start=start.isoformat(),
            end=end.isoformat(),
            ledger_rows=rows,
        )
        # A DEGRADED billing run imported (its watermark moved): it waits for the next regular
        # run like an OK one — an early retry would refuse the same rows again.
        return "ok"

    async def _failed(self, name: str, exc: Exception, now: dt.datetime, failure: Failure) -> None:
        log.error(
            "ingest failed",
            connector=name,
            status=str(failure.status),
            next=_NEXT_STEP[failure.next_step],
            error=str(exc),
        )
        if failure.bug:
            log_traceback_once(exc, f"connector {name}")
        if self.telemetry is not None:
            self.telemetry.ingest_runs.labels(name, str(failure.status)).inc()
        try:
            await asyncio.to_thread(_record_failure, self.engine, name, failure.status, failure.message, now)
        except Exception:  # noqa: BLE001  (the database may be what failed)
            log.warning("could not record connector failure", connector=name, exc_info=True)
