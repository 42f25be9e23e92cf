"""Facts pushed by a node agent reach the rules: ``POST /api/v1/batches`` with device tags and
workload facts → staging (pushed_device.tags, pushed_workload.facts) → the ``agent`` connector's
ingest under ``[[attribution]]`` rules → owners on the ledger, facts kept in workload_fact."""

from __future__ import annotations

import datetime as dt

from attribution_fleet import owners, rule
from push_client import NOW, batch, post, push_client
from sqlalchemy import Engine, select

from service.agent_source import AgentConfig, AgentConnector
from service.ledger.ingest import ingest_window
from service.models import Device, PushedDevice, PushedWorkload, WorkloadFact
from service.timeutil import floor_hour

TOKEN = "a" * 32


def test_pushed_facts_name_the_owner_at_ingest(engine: Engine) -> None:
    body = batch(n=60)
    body["devices"][0]["tags"] = {"k8s.node_label:pool": "gpu-research"}
    body["workloads"][0]["facts"] = {"k8s.namespace": "ns", "k8s.pod_label:project": "atlas"}
    with push_client(engine) as client:
        assert post(client, body).status_code == 200
    with engine.connect() as conn:
        assert conn.execute(select(PushedDevice.__table__.c.tags)).scalar_one() == {  # type: ignore[attr-defined]
            "k8s.node_label:pool": "gpu-research"
        }
        assert conn.execute(select(PushedWorkload.__table__.c.facts)).scalar_one() == {  # type: ignore[attr-defined]
            "k8s.namespace": "ns",
            "k8s.pod_label:project": "atlas",
        }
    rules = [
        rule("project-label", "k8s.pod_label:project", "project"),
        rule("pool", "k8s.node_label:pool", "team", match="gpu-(.*)", value="pool-$1", override=True),
    ]
    connector = AgentConnector(AgentConfig(name="node-a", token=TOKEN), engine=engine, clock=lambda: NOW)
    start = floor_hour(NOW - dt.timedelta(hours=1))
    ingest_window(engine, "node-a", connector, start, NOW, attribution_rules=rules)
    # the agent named team "research"; the override rule's node pool wins over it
    named = {r[2:] for r in owners(engine)}
    assert named == {("k8s:ns/p/c", "atlas", "pool-research", None, "project-label")}
    with engine.connect() as conn:
        kept = conn.execute(select(WorkloadFact.__table__)).one()  # type: ignore[attr-defined]
        tags = conn.execute(select(Device.__table__.c.tags)).scalar_one()  # type: ignore[attr-defined]
    assert (kept.source, kept.workload_key, kept.team, kept.project) == (
        "node-a",
        "k8s:ns/p/c",
        "research",
        None,
    )
    assert kept.facts == {"k8s.namespace": "ns", "k8s.pod_label:project": "atlas"}
    assert tags == {"k8s.node_label:pool": "gpu-research"}
