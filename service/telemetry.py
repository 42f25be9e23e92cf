"""Prometheus metrics of one process: HTTP traffic, ingest runs, connector freshness.

Each :class:`Telemetry` owns its ``CollectorRegistry`` (not the global one), so tests and several
apps in one process don't collide. Watermark age is read from ``connector_state`` at scrape time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine
from sqlmodel import Session, select

from service.alerts.metrics import AlertFiringCollector
from service.models import ConnectorState
from service.timeutil import UTC

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def utc_now() -> dt.datetime:
    return dt.datetime.now(UTC)


class WatermarkAgeCollector(Collector):
    """``gpu_ledger_connector_watermark_age_seconds{connector}``: now − watermark (≥ 0), per connector."""

    def __init__(self, engine: Engine, clock: Callable[[], dt.datetime] = utc_now):
        self.engine, self.clock = engine, clock

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "gpu_ledger_connector_watermark_age_seconds",
            "Seconds between now and the connector's watermark (how stale its data is).",
            labels=["connector"],
        )
        try:
            with Session(self.engine) as session:
                rows = session.exec(select(ConnectorState.name, ConnectorState.watermark)).all()
        except Exception:  # noqa: BLE001  (a scrape must not fail because the DB is down)
            rows = []
        now = self.clock()
        for name, watermark in rows:
            if watermark is not None:
                # The watermark is the end of the last ingested hour, which can lie ahead of now.
                family.add_metric([name], max(0.0, (now - watermark).total_seconds()))
        yield family


class Telemetry:
    """The metrics the app and the scheduler update."""

    def __init__(self, engine: Engine | None = None, clock: Callable[[], dt.datetime] = utc_now):
        self.registry = CollectorRegistry()
        self.http_requests = Counter(
            "gpu_ledger_http_requests",
            "HTTP requests by route, method and status code.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.http_latency = Histogram(
            "gpu_ledger_http_request_duration_seconds",
            "HTTP request latency by route.",
            ["route", "method"],
            registry=self.registry,
        )
        self.ingest_runs = Counter(
            "gpu_ledger_ingest_runs",
            "Ingest runs by connector and outcome (a ConnectorStatus value).",
            ["connector", "status"],
            registry=self.registry,
        )
        self.ingest_rows = Counter(
            "gpu_ledger_ingest_rows",
            "Ledger rows written by connector.",
            ["connector"],
            registry=self.registry,
        )
        if engine is not None:
            self.registry.register(WatermarkAgeCollector(engine, clock))
            self.registry.register(AlertFiringCollector(engine))

    def render(self) -> bytes:
        return generate_latest(self.registry)
