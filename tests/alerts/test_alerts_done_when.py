"""Issue 15's "done when" for alerts, end to end with real parts: a workload idle for 3 hours is
found after an ingest run by the real scheduler and ingestor, announced once to a real HTTP
receiver (generic JSON and Slack) and a real SMTP server (aiosmtpd), not again while it stays
idle, resolved when it works again; a flap within min_interval_h is not announced; a firing held
back is announced once the interval has passed. Then the `alerts` answers over HTTP, scoped, and
the Prometheus gauge.

The fleet: one H200 (sm_active sampled every minute) running workload ``train-1`` of project
``ml``. Hour by hour from T0 (a Monday 00:00Z) its SM activity is::

    hour   0  1  2  3  4  5  6  7  8  9 10 11 12 13
    sm %  80 80  1  1  1  1 80  1  1  1 80  1  1  1     (idle: below the ledger's 5 %)

The rule: idle_workload, hours = 3, min_interval_h = 6. Each run ingests up to `now` (whole
hours) and the alert engine evaluates at `now`; the workload is idle in all of the last 3 hours
up to the watermark exactly when hours now−3, now−2, now−1 are all idle:

    run at T0+  4h: hours 1-3  → 80,1,1   no
               5h: hours 2-4  → 1,1,1    FIRES, announced (first)
               6h: hours 3-5  → idle     still firing: nothing sent
               7h: hours 4-6  → 6 busy   RESOLVED, announced (its firing was)
              10h: hours 7-9  → idle     fires again 5 h after the last announcement < 6 h: held back
              11h: hours 8-10 → 10 busy  resolves: not announced (its firing was not)
              14h: hours 11-13 → idle    fires 9 h after the last announcement ≥ 6 h: announced
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import httpx
import polars as pl
from api.conftest import serve
from notify.smtpserver import smtp_server
from prometheus_client.parser import text_string_to_metric_families
from receiver import http_receiver
from sqlalchemy import Engine, select

from connectors.sdk import SAMPLE_SCHEMA, ConnectorConfig, DeviceInfo, SampleBatch, Sampling, WorkloadInfo
from service.alerts.engine import AlertConfig, AlertEngine
from service.alerts.rules import parse_alert_tables
from service.auth.tokens import TokenStore
from service.models import AlertEvent
from service.notify.email import SmtpSettings
from service.scheduler import Scheduler

T0 = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
SM_PCT = [80, 80, 1, 1, 1, 1, 80, 1, 1, 1, 80, 1, 1, 1]
SLACK_PATH = "/services/T000/B000/s3cr3t-token"


class _Config(ConnectorConfig):
    pass


class ScriptedFleet:
    """One GPU, one workload, SM activity per hour from SM_PCT; never a sample at or after `now`."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = _Config
    sampling = Sampling.every(60.0)

    def __init__(self, now: list[dt.datetime]) -> None:
        self.now = now

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        stop = min(end, self.now[0], T0 + dt.timedelta(hours=len(SM_PCT)))
        first = max(start, T0)
        minutes = int((stop - first).total_seconds() // 60)
        rows = []
        for i in range(max(0, minutes)):
            ts = first + dt.timedelta(minutes=i)
            pct = SM_PCT[int((ts - T0).total_seconds() // 3600)]
            rows.append(("GPU-a", int(ts.timestamp() * 1000), "sm_active", float(pct), "train-1", 1.0))
        device = DeviceInfo("GPU-a", "onprem", region="dc1", gpu_model="NVIDIA H200")
        workload = WorkloadInfo("train-1", project="ml", team="research", workload="train-1")
        yield SampleBatch(
            pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row"), [device], workloads=[workload]
        )


def _config(receiver_base: str, smtp: SmtpSettings) -> AlertConfig:
    rules, channels = parse_alert_tables(
        "test",
        [
            {
                "name": "zombie",
                "kind": "idle_workload",
                "hours": 3,
                "min_interval_h": 6,
                "channels": ["hook", "slack", "mail"],
            }
        ],
        [
            {"name": "hook", "type": "webhook", "url": f"{receiver_base}/generic"},
            {"name": "slack", "type": "slack", "url": f"{receiver_base}{SLACK_PATH}"},
            {"name": "mail", "type": "email", "to": ["owner@example.com"]},
        ],
        has_smtp=True,
    )
    return AlertConfig(tuple(rules), tuple(channels), smtp)


def _run_at(scheduler: Scheduler, now: list[dt.datetime], hours: int, connector: ScriptedFleet) -> None:
    now[0] = T0 + dt.timedelta(hours=hours)
    config = _Config(name="dc1", type="scripted", backfill_days=4 / 24)
    assert asyncio.run(scheduler.run_once(config, connector)) == "ok"


def test_idle_job_fires_once_resolves_and_does_not_flap(engine: Engine, tmp_path: Path) -> None:
    now = [T0]
    fleet = ScriptedFleet(now)
    with http_receiver() as hooks, smtp_server(tmp_path) as mail:
        smtp = SmtpSettings(host=mail.host, port=mail.port, starttls=False, from_addr="ledger@example.com")
        alerts = AlertEngine(engine, _config(hooks.base, smtp))
        scheduler = Scheduler(engine, [], after_run=alerts.after_run, clock=lambda: now[0])

        def sent() -> tuple[list[str], list[str], list[str]]:
            generic = [b["state"] for b in hooks.bodies("/generic")]
            slack = [b["text"].split("]")[0].split("[")[1] for b in hooks.bodies(SLACK_PATH)]
            subjects = [str(r.message["Subject"]) for r in mail.received]
            return generic, slack, subjects

        _run_at(scheduler, now, 4, fleet)
        assert sent() == ([], [], [])

        _run_at(scheduler, now, 5, fleet)
        assert sent() == (["FIRING"], ["FIRING"], ["[FIRING] zombie: train-1"])
        [doc] = hooks.bodies("/generic")
        assert doc == {
            "version": 1,
            "source": "gpu-ledger",
            "rule": "zombie",
            "kind": "idle_workload",
            "state": "FIRING",
            "subjectKey": "dc1/train-1",
            "subject": "train-1",
            "project": "ml",
            "team": "research",
            "value": "3",
            "unit": "h",
            "threshold": "3",
            "message": "workload train-1 (project ml) on dc1 held 1 GPU(s) idle for the last 3 h",
            "since": "2026-11-02T05:00:00+00:00",
            "at": "2026-11-02T05:00:00+00:00",
        }
        [slack] = hooks.bodies(SLACK_PATH)
        assert slack["text"] == (
            ":red_circle: [FIRING] zombie: train-1\n"
            "workload train-1 (project ml) on dc1 held 1 GPU(s) idle for the last 3 h"
        )
        assert slack["blocks"][0]["text"]["text"] == slack["text"]
        assert mail.received[0].rcpt_tos == ["owner@example.com"]

        _run_at(scheduler, now, 6, fleet)  # still idle: nothing new
        assert sent() == (["FIRING"], ["FIRING"], ["[FIRING] zombie: train-1"])

        _run_at(scheduler, now, 7, fleet)  # hour 6 busy: resolved, announced
        assert sent() == (
            ["FIRING", "RESOLVED"],
            ["FIRING", "RESOLVED"],
            ["[FIRING] zombie: train-1", "[RESOLVED] zombie: train-1"],
        )

        for hours in (8, 9, 10, 11):  # the flap: fires at 10 (held back), resolves at 11 (silent)
            _run_at(scheduler, now, hours, fleet)
        assert len(hooks.bodies("/generic")) == 2 and len(mail.received) == 2

        for hours in (12, 13, 14):  # fires at 14, 9 h after the last announcement: announced
            _run_at(scheduler, now, hours, fleet)
        assert sent()[0] == ["FIRING", "RESOLVED", "FIRING"]
        assert len(mail.received) == 3

    with engine.connect() as conn:
        events = conn.execute(
            select(AlertEvent.at, AlertEvent.state, AlertEvent.notify, AlertEvent.deliveries).order_by(
                AlertEvent.id
            )
        ).all()
    h = lambda n: T0 + dt.timedelta(hours=n)  # noqa: E731
    ok = "hook: SENT, slack: SENT, mail: SENT"
    assert [tuple(e) for e in events] == [
        (h(5), "FIRING", True, ok),
        (h(7), "RESOLVED", True, ok),
        (h(10), "FIRING", False, ""),
        (h(11), "RESOLVED", False, ""),
        (h(14), "FIRING", True, ok),
    ]


def _gql(base: str, token: str, query: str) -> dict[str, Any]:
    r = httpx.post(
        f"{base}/graphql", json={"query": query}, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    body: dict[str, Any] = r.json()
    return body


HISTORY = """{ alertHistory(window: {start: "2026-11-02T00:00:00Z", end: "2026-11-03T00:00:00Z"}) {
  rule state at subject project notified deliveries } }"""


def test_alerts_answers_are_scoped_and_gauged(engine: Engine, tmp_path: Path) -> None:
    now = [T0]
    fleet = ScriptedFleet(now)
    with http_receiver() as hooks, smtp_server(tmp_path) as mail:
        smtp = SmtpSettings(host=mail.host, port=mail.port, starttls=False, from_addr="ledger@example.com")
        config = _config(hooks.base, smtp)
        silent_rules, _ = parse_alert_tables(
            "test", [{"name": "silent", "kind": "connector_silent", "hours": 1}], [], has_smtp=False
        )
        config = AlertConfig(config.rules + tuple(silent_rules), config.channels, smtp)
        alerts = AlertEngine(engine, config)
        scheduler = Scheduler(engine, [], after_run=alerts.after_run, clock=lambda: now[0])
        for hours in (4, 5):
            _run_at(scheduler, now, hours, fleet)
        alerts.evaluate(T0 + dt.timedelta(hours=7))  # no ingest for 2 h: dc1 is silent
    store = TokenStore(engine)
    tokens = {
        scope: store.create(f"h4-{scope.replace(':', '.')}", [scope])[0]
        for scope in ("read", "read:project:ml", "read:project:web", "read:team:research", "metrics")
    }
    for base in serve(engine, auth={}):
        everything = _gql(base, tokens["read"], "{ alerts { rule kind state subject project value unit } }")
        assert everything == {
            "data": {
                "alerts": [
                    {"rule": "silent", "kind": "connector_silent", "state": "FIRING", "subject": "dc1",
                     "project": None, "value": "2", "unit": "h"},
                    {"rule": "zombie", "kind": "idle_workload", "state": "FIRING", "subject": "train-1",
                     "project": "ml", "value": "3", "unit": "h"},
                ]
            }
        }  # fmt: skip
        for scope in ("read:project:ml", "read:team:research"):
            mine = _gql(base, tokens[scope], "{ alerts { rule subject } }")
            assert mine == {"data": {"alerts": [{"rule": "zombie", "subject": "train-1"}]}}
        assert _gql(base, tokens["read:project:web"], "{ alerts { rule } }") == {"data": {"alerts": []}}
        history = _gql(base, tokens["read:project:ml"], HISTORY)["data"]["alertHistory"]
        assert history == [
            {"rule": "zombie", "state": "FIRING", "at": "2026-11-02T05:00:00+00:00", "subject": "train-1",
             "project": "ml", "notified": True, "deliveries": "hook: SENT, slack: SENT, mail: SENT"}
        ]  # fmt: skip
        firing = _gql(base, tokens["read"], "{ alerts(state: RESOLVED) { rule } }")
        assert firing == {"data": {"alerts": []}}
        paged = _gql(base, tokens["read"], "{ alerts(first: 1) { rule cursor } }")["data"]["alerts"]
        assert [a["rule"] for a in paged] == ["silent"]
        after = paged[0]["cursor"]
        rest = _gql(base, tokens["read"], f'{{ alerts(first: 5, after: "{after}") {{ rule }} }}')
        assert rest == {"data": {"alerts": [{"rule": "zombie"}]}}
        forged = _gql(base, tokens["read"], '{ alerts(first: 5, after: "bm90IGEgY3Vyc29y") { rule } }')
        assert forged["errors"][0]["extensions"]["code"] == "INVALID_ARGUMENT"
        text = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {tokens['metrics']}"}).text
        gauges = {
            (s.labels["rule"], s.labels["kind"], s.labels["subject"]): s.value
            for family in text_string_to_metric_families(text)
            if family.name == "gpu_ledger_alert_firing"
            for s in family.samples
        }
        assert gauges == {
            ("silent", "connector_silent", "dc1"): 1.0,
            ("zombie", "idle_workload", "train-1"): 1.0,
        }
        assert SLACK_PATH not in text and "s3cr3t" not in text
