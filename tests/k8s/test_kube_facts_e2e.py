"""Issue 16 with the node agent lean (issue 13): the agent in its default configuration — no API
server, no kubelet — keys a containerd pod's GPU-hour by its cgroup alone, the ``kubernetes`` facts
connector (one watch of the fake API server, as the service runs it) describes that key, and the
rows the agent's connector already wrote get their namespace-label owner: in
``cost(groupBy: [PROJECT, OWNER_RULE])`` over the real app's GraphQL."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

from attribution.attribution_fleet import owners
from push_client import NOW, push_client
from sqlalchemy import Engine
from sqlmodel import Session
from starlette.testclient import TestClient

from connectors.registry import default_registry
from connectors.sdk import ConnectorStatus
from service.agent.sampler import load_sampler
from service.agent.spool import Spool
from service.agent_source import AgentConfig, AgentConnector
from service.app import create_app
from service.facts_ingest import ingest_facts
from service.ledger.ingest import ingest_window
from service.pricing.rates import RateCardConfig, sync_rate_cards
from service.settings import load_settings
from service.timeutil import floor_hour
from tests.k8s.fake_kube_api import FakeKubeApi
from tests.k8s.fake_nvml_sampler import FAKE
from tests.k8s.objects import POD_UID, TRAINER_ID
from tests.k8s.test_agent_k8s import GPU0, GPU1, GPU2, api, nvml, nvml_libs, settings, stop_watchers

__all__ = ["api", "nvml", "nvml_libs", "stop_watchers"]  # the fixtures this module uses
TOKEN = "a" * 32
START = floor_hour(NOW - dt.timedelta(hours=1))
RATE = Decimal("4.00")
KEY = f"k8s:{POD_UID}/{TRAINER_ID[:12]}"  # what the agent's cgroup reader makes of pid 4242
RULES = """
[[attribution]]
name = "project-from-cost-center"
source = "k8s.namespace_label:cost-center"
dimension = "project"
values = { cc-4711 = "research" }

[[attribution]]
name = "team-from-pod-label"
source = "k8s.pod_label:team"
dimension = "team"
"""
QUERY = """query($w: TimeWindow!) { cost(window: $w, groupBy: [PROJECT, OWNER_RULE]) {
  project ownerRule unallocated cost { amount currency } } }"""


def test_the_lean_agent_and_the_kubernetes_facts_connector_own_a_containerd_pod(
    nvml: object, api: FakeKubeApi, tmp_path: Path, engine: Engine
) -> None:
    config = tmp_path / "ledger.toml"
    url = engine.url.render_as_string(hide_password=False)
    config.write_text(f'database_url = "{url}"\n[auth]\nanonymous_read = true\n{RULES}')
    ledger = load_settings(config)
    with Session(engine) as session:
        card = RateCardConfig(name="site", environment="onprem", rate_per_gpu_hour=RATE, currency="USD",
                              valid_from=START - dt.timedelta(days=1))  # fmt: skip
        sync_rate_cards(session, [card])
        session.commit()

    # The agent as the DaemonSet runs it: neither kubernetes_api nor pod_resources_socket.
    agent = settings(tmp_path)
    assert (agent.kubernetes_api, agent.pod_resources_socket) == (None, None)
    sampler = load_sampler(agent)
    spool = Spool(tmp_path / "spool", "n17", "node-a", fsync=False)
    for minute in range(60):  # an hour of readings, one a minute
        FAKE["now_s"] = START.timestamp() + 60 * minute
        spool.append(sampler.sample())
    sealed = spool.seal()
    assert sealed is not None
    payload = spool.payload(sealed)
    assert {w["workload_key"] for w in payload["workloads"]} == {KEY}
    with push_client(engine, period_s=60) as client:
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        answer = client.post("/api/v1/batches", content=json.dumps(payload), headers=headers)
        assert answer.status_code == 200, answer.text
    rules = ledger.attribution
    connector = AgentConnector(AgentConfig(name="node-a", period_s=60), engine=engine, clock=lambda: NOW)
    ingest_window(engine, "node-a", connector, START, NOW, attribution_rules=rules)
    # ingested before any facts: the pod's hour has no owner yet
    assert {r[0]: r[2:] for r in owners(engine)}[GPU0] == (KEY, None, None, None, None)

    # The service's facts connector: one watch of the cluster; its run re-owns the rows of its window.
    facts = default_registry().build(
        {"name": "cluster", "type": "kubernetes", "api": str(api.kubeconfig(tmp_path))}
    )
    try:
        result = ingest_facts(engine, "cluster", facts, START, NOW, attribution_rules=rules)
        quiet = ingest_facts(engine, "cluster", facts, START, NOW, attribution_rules=rules)
    finally:
        facts.close()
    assert result.status == ConnectorStatus.OK
    assert (result.read, result.accepted, result.workloads, result.ledger_rows) == (2, 2, 12, 1)
    # the next minute: nothing changed, nothing written, the rules not run again
    assert (quiet.status, quiet.workloads, quiet.ledger_rows) == (ConnectorStatus.OK, 0, 0)
    assert quiet.skipped == {"pods unchanged since saved": 2}
    assert {r[0]: r[2:] for r in owners(engine)} == {
        GPU0: (KEY, "research", "nlp", None, "project-from-cost-center"),
        GPU1: ("", None, None, None, None),  # idle: without the kubelet's allocations, nobody's
        GPU2: ("", None, None, None, None),
    }

    with TestClient(create_app(ledger, engine)) as client:
        window = {"start": START.isoformat(), "end": NOW.isoformat()}
        body = client.post("/graphql", json={"query": QUERY, "variables": {"w": window}}).json()
    assert "errors" not in body, body
    got = {(r["project"], r["ownerRule"], r["unallocated"]): Decimal(r["cost"]["amount"])
           for r in body["data"]["cost"]}  # fmt: skip
    assert got == {("research", "project-from-cost-center", False): RATE, (None, None, True): 2 * RATE}
