"""A containerd pod owned by its namespace's label, end to end: the node agent (fake NVML, fake /proc,
gRPC fake kubelet, fake API server) samples an hour, its spool is pushed to the service's
``/api/v1/batches``, and the ``agent`` connector's ingest under ``[[attribution]]`` rules names
each GPU's owner on the ledger, with the rule that did."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from attribution.attribution_fleet import owners, rule
from push_client import NOW, push_client
from sqlalchemy import Engine

from service.agent.sampler import load_sampler
from service.agent.spool import Spool
from service.agent_source import AgentConfig, AgentConnector
from service.ledger.ingest import ingest_window
from service.timeutil import floor_hour
from tests.k8s.fake_kube_api import FakeKubeApi
from tests.k8s.fake_kubelet import FakeKubelet
from tests.k8s.fake_nvml_sampler import FAKE
from tests.k8s.test_agent_k8s import GPU0, GPU1, GPU2, api, kubelet, nvml, nvml_libs, settings, stop_watchers
from tests.k8s.test_kube_meta import eventually

__all__ = ["api", "kubelet", "nvml", "nvml_libs", "stop_watchers"]  # the fixtures this module uses
TOKEN = "a" * 32
START = floor_hour(NOW - dt.timedelta(hours=1))


def test_a_containerd_pod_is_owned_by_its_namespace_label(
    nvml: object, kubelet: FakeKubelet, api: FakeKubeApi, tmp_path: Path, engine: Engine
) -> None:
    sampler = load_sampler(settings(tmp_path, pod_resources_socket=kubelet.socket,
                                    kubernetes_api=str(api.kubeconfig(tmp_path))))  # fmt: skip
    eventually(lambda: all(e.is_set() for e in sampler.meta.synced.values()), "listed")  # type: ignore[attr-defined]
    spool = Spool(tmp_path / "spool", "n17", "node-a", fsync=False)
    for minute in range(60):  # an hour of readings, one a minute
        FAKE["now_s"] = START.timestamp() + 60 * minute
        spool.append(sampler.sample())
    sealed = spool.seal()
    assert sealed is not None
    with push_client(engine, period_s=60) as client:
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        answer = client.post("/api/v1/batches", content=json.dumps(spool.payload(sealed)), headers=headers)
        assert answer.status_code == 200, answer.text
    rules = [
        rule(
            "cost-center",
            "k8s.namespace_label:cost-center",
            "project",
            values={"cc-4711": "research", "cc-0815": "inference"},
        ),  # fmt: skip
        rule(
            "node-pool",
            "k8s.node_label:node.kubernetes.io/instance-type",
            "team",
            match="p5e\\..*",
            value="h200",
        ),
    ]
    connector = AgentConnector(AgentConfig(name="node-a", period_s=60), engine=engine, clock=lambda: NOW)
    ingest_window(engine, "node-a", connector, START, NOW, attribution_rules=rules)
    got = {row[0]: row[2:] for row in owners(engine)}
    assert got == {
        # a containerd pod named from its cgroup by the API; its namespace's cost center is the project
        GPU0: ("k8s:ml-research/bert-train-0/trainer", "research", "nlp", None, "cost-center"),
        # idle, held by llama-0 (kubelet); its pod label gpu-ledger.project names it itself
        GPU1: ("k8s:ml-infer/llama-0/server", "chat", "h200", None, "source"),
        # nobody holds GPU2: the unallocated pool, which no rule owns
        GPU2: ("", None, None, None, None),
    }
