"""``gpu_ledger_alert_firing{rule,kind,subject}`` = 1 per firing alert, for Alertmanager users;
``gpu_ledger_alert_deliveries_pending{channel}``: announcements not yet sent to each channel
(waiting for their first try or retrying: a channel stuck above 0 is a receiver that is down).

Read from ``alert_state`` and ``alert_delivery`` at scrape time, so every ``serve`` worker shows
the same alerts as the one whose scheduler evaluated them. Subjects are bounded by the fleet
(workloads, projects, connectors); an alert that resolves leaves the series (Prometheus marks it
stale).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine

from service.alerts.outbox import pending_by_channel
from service.alerts.store import firing


class AlertFiringCollector(Collector):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "gpu_ledger_alert_firing",
            "1 for each firing GPU Ledger alert (rule, kind and subject as labels).",
            labels=["rule", "kind", "subject"],
        )
        pending = GaugeMetricFamily(
            "gpu_ledger_alert_deliveries_pending",
            "GPU Ledger alert announcements not yet sent to the channel (first try or retrying).",
            labels=["channel"],
        )
        try:
            with self.engine.connect() as conn:
                rows, waiting = firing(conn), pending_by_channel(conn)
        except Exception:  # noqa: BLE001  (a scrape must not fail because the DB is down)
            rows, waiting = [], {}
        for rule, kind, subject in rows:
            family.add_metric([rule, kind, subject], 1.0)
        for channel, n in sorted(waiting.items()):
            pending.add_metric([channel], float(n))
        yield family
        yield pending
