"""The ``kubernetes`` facts connector: one list+watch of the whole cluster (the official client
against the local fake API server), each pod's containers described under the keys the node agent
gives them from cgroups alone, and only what changed since the last saved run."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from connectors.kube_facts import KubernetesFactsConfig, KubernetesFactsConnector
from connectors.registry import default_registry
from connectors.sdk import ConfigurationError, RetriableError
from connectors.sdk.facts import FactsBatch
from service.models import ConnectorState, WorkloadFact
from service.scheduler import Scheduler
from tests.k8s.fake_kube_api import FakeKubeApi, fake_kube_api
from tests.k8s.objects import INIT_ID, NODE, POD_UID, SIDECAR_ID, TRAINER_ID, namespace, node, pod
from tests.k8s.test_kube_meta import eventually

T0 = dt.datetime(2026, 11, 30, 9, tzinfo=dt.UTC)
OTHER_UID = "11111111-2222-4333-8444-555555555555"
OTHER_ID = "c0" * 32
NODE3 = "gpu-node-3"
BERT_LABELS = {
    "k8s.pod_label:app.kubernetes.io/name": "bert",
    "k8s.pod_label:controller-revision-hash": "bert-train-6b9c7d",
    "k8s.pod_label:team": "nlp",
}
ML_RESEARCH = {
    "k8s.namespace_label:cost-center": "cc-4711",
    "k8s.namespace_label:kubernetes.io/metadata.name": "ml-research",
    "k8s.namespace_label:team": "nlp",
}
NODE17 = {
    "k8s.node_label:kubernetes.io/hostname": NODE,
    "k8s.node_label:kubernetes.io/os": "linux",
    "k8s.node_label:node.kubernetes.io/instance-type": "p5e.48xlarge",
    "k8s.node_label:nvidia.com/gpu.present": "true",
    "k8s.node_label:nvidia.com/gpu.product": "NVIDIA-H200",
    "k8s.node_label:topology.kubernetes.io/zone": "us-east-1a",
}


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with fake_kube_api() as api:
        api.put("pods", pod())  # bert-train-0 on gpu-node-17: trainer, log-shipper, init fetch-weights
        api.put("pods", pod("infer-0", "ml-infer", OTHER_UID, node=NODE3, labels={"app": "llama"},
                            containers={"server": OTHER_ID}))  # fmt: skip
        api.put("namespaces", namespace("ml-research", {"team": "nlp", "cost-center": "cc-4711"}))
        api.put("namespaces", namespace("ml-infer", {}))
        api.put("nodes", node())
        api.put("nodes", node(NODE3, {"pool": "b"}))
        yield api


@pytest.fixture
def facts_source(api: FakeKubeApi, tmp_path: Path) -> Iterator[KubernetesFactsConnector]:
    config = KubernetesFactsConfig(name="k8s", api=str(api.kubeconfig(tmp_path)), sync_timeout_s=20)
    connector = KubernetesFactsConnector(config, options={"backoff_s": (0.01, 0.05)})
    try:
        yield connector
    finally:
        connector.close()
        api.close_watches()


def run(source: KubernetesFactsConnector, *, save: bool = True) -> tuple[FactsBatch, dict[str, Any]]:
    batch = source.facts(T0, T0 + dt.timedelta(minutes=1))
    if save:
        source.saved(batch)
    return batch, {w.workload_key: w.facts for w in batch.workloads}


def bert(container: str | None) -> dict[str, str]:
    names = {"k8s.namespace": "ml-research", "k8s.pod": "bert-train-0"}
    return names | ({"k8s.container": container} if container else {}) | BERT_LABELS | ML_RESEARCH | NODE17


def infer(container: str | None) -> dict[str, str]:
    names = {"k8s.namespace": "ml-infer", "k8s.pod": "infer-0"}
    return (
        names
        | ({"k8s.container": container} if container else {})
        | {
            "k8s.pod_label:app": "llama",
            "k8s.namespace_label:kubernetes.io/metadata.name": "ml-infer",
            "k8s.node_label:pool": "b",
        }
    )


def test_every_pod_of_the_cluster_under_the_agents_cgroup_keys_and_its_names(
    api: FakeKubeApi, facts_source: KubernetesFactsConnector
) -> None:
    batch, facts = run(facts_source)
    assert facts == {
        # the keys the agent gives a containerd pod from its cgroup: k8s:<pod-uid>/<container-id[:12]>
        f"k8s:{POD_UID}": bert(None),
        f"k8s:{POD_UID}/{TRAINER_ID[:12]}": bert("trainer"),
        f"k8s:{POD_UID}/{SIDECAR_ID[:12]}": bert("log-shipper"),
        f"k8s:{POD_UID}/{INIT_ID[:12]}": bert("fetch-weights"),
        # and its names (cri-dockerd's labels, the kubelet's pod-resources, dcgm-exporter)
        "k8s:ml-research/bert-train-0/trainer": bert("trainer"),
        "k8s:ml-research/bert-train-0/log-shipper": bert("log-shipper"),
        "k8s:ml-research/bert-train-0/fetch-weights": bert("fetch-weights"),
        # another node's pod (its init container's id is the fixture's too), with that node's labels
        f"k8s:{OTHER_UID}": infer(None),
        f"k8s:{OTHER_UID}/{OTHER_ID[:12]}": infer("server"),
        f"k8s:{OTHER_UID}/{INIT_ID[:12]}": infer("fetch-weights"),
        "k8s:ml-infer/infer-0/server": infer("server"),
        "k8s:ml-infer/infer-0/fetch-weights": infer("fetch-weights"),
    }  # fmt: skip
    assert (batch.read, batch.accepted, dict(batch.skipped)) == (2, 2, {})
    # one watch per kind for the whole cluster: no field selector
    assert {path: q.get("fieldSelector") for path, q in api.requests} == {
        "/api/v1/pods": None, "/api/v1/namespaces": None, "/api/v1/nodes": None
    }  # fmt: skip


def test_only_what_changed_since_the_last_saved_run_and_a_watch_event_that_relabels(
    api: FakeKubeApi, facts_source: KubernetesFactsConnector
) -> None:
    run(facts_source)
    batch, facts = run(facts_source)
    assert (facts, batch.read, batch.accepted, dict(batch.skipped)) == (
        {}, 2, 0, {"pods unchanged since saved": 2}
    )  # fmt: skip
    api.put("namespaces", namespace("ml-research", {"team": "vision", "cost-center": "cc-4711"}))
    eventually(
        lambda: facts_source.meta.namespace_labels("ml-research").get("team") == "vision", "relabelled"
    )
    batch, facts = run(facts_source, save=False)
    assert set(facts) == {
        f"k8s:{POD_UID}", *(f"k8s:{POD_UID}/{c[:12]}" for c in (TRAINER_ID, SIDECAR_ID, INIT_ID)),
        *(f"k8s:ml-research/bert-train-0/{c}" for c in ("trainer", "log-shipper", "fetch-weights")),
    }  # fmt: skip
    assert facts[f"k8s:{POD_UID}/{TRAINER_ID[:12]}"]["k8s.namespace_label:team"] == "vision"
    assert (batch.accepted, dict(batch.skipped)) == (1, {"pods unchanged since saved": 1})
    # not saved (the ingest failed): the next run answers it again, then it is saved
    assert run(facts_source)[1] == facts
    assert run(facts_source)[1] == {}


def test_an_ended_pod_is_described_as_it_was_until_a_run_with_it_is_saved(
    api: FakeKubeApi, facts_source: KubernetesFactsConnector
) -> None:
    run(facts_source)
    short = pod("job-7", "ml-research", "77777777-aaaa-4bbb-8ccc-dddddddddddd", labels={"team": "asr"},
                containers={"main": "d7" * 32})  # fmt: skip
    api.put("pods", short)  # started and ended between two runs
    eventually(lambda: "77777777-aaaa-4bbb-8ccc-dddddddddddd" in facts_source.meta.pods(), "seen")
    api.delete("pods", short)
    eventually(lambda: "77777777-aaaa-4bbb-8ccc-dddddddddddd" not in facts_source.meta.pods(), "gone")
    api.delete("namespaces", namespace("ml-research", {}))  # its namespace too
    eventually(lambda: not facts_source.meta.namespace_labels("ml-research"), "namespace gone")
    batch, facts = run(facts_source, save=False)
    key = f"k8s:77777777-aaaa-4bbb-8ccc-dddddddddddd/{'d7' * 6}"
    assert facts[key]["k8s.pod_label:team"] == "asr"
    assert facts[key]["k8s.namespace_label:cost-center"] == "cc-4711"  # as it was when the pod left
    assert facts["k8s:ml-research/job-7/main"] == facts[key]
    assert run(facts_source, save=False)[1] == facts  # unsaved: kept
    run(facts_source)
    assert run(facts_source)[1] == {} and facts_source._ended == {}
    assert key not in facts_source._saved  # forgotten once saved: memory holds live pods only


def test_410_gone_relists_and_a_pod_deleted_in_the_gap_is_an_ended_pod(
    api: FakeKubeApi, facts_source: KubernetesFactsConnector, caplog: pytest.LogCaptureFixture
) -> None:
    run(facts_source)
    with caplog.at_level(logging.INFO, logger="connectors.kube_meta"):
        api.compact()  # the versions the watches hold are compacted away, with the deletion's event:
        api.forget("pods", pod("infer-0", "ml-infer"))  # only a relist can notice it
        api.put("nodes", node(NODE, {"pool": "a"}))  # relabelled too
        api.close_watches()  # the next watches get an ERROR event with code 410
        eventually(lambda: api.lists("pods") == 2 and OTHER_UID not in facts_source.meta.pods(), "relisted")
        eventually(lambda: facts_source.meta.node_labels(NODE) == {"pool": "a"}, "nodes relisted")
    assert any("410" in r.getMessage() for r in caplog.records)
    batch, facts = run(facts_source)
    # bert-train-0's keys again (its node's labels changed); infer-0 ended, already saved unchanged
    assert facts[f"k8s:{POD_UID}/{TRAINER_ID[:12]}"] == {
        k: v for k, v in bert("trainer").items() if not k.startswith("k8s.node_label:")
    } | {"k8s.node_label:pool": "a"}
    assert f"k8s:{OTHER_UID}" not in facts
    assert (batch.read, batch.accepted, dict(batch.skipped)) == (2, 1, {"pods unchanged since saved": 1})
    assert facts_source._ended == {} and f"k8s:{OTHER_UID}" not in facts_source._saved


def test_ended_pods_are_bounded_the_oldest_dropped_and_counted(
    api: FakeKubeApi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = KubernetesFactsConfig(name="k8s", api=str(api.kubeconfig(tmp_path)), max_ended_pods=2)
    source = KubernetesFactsConnector(config)
    try:
        run(source)
        uids = [f"{i:08d}-aaaa-4bbb-8ccc-dddddddddddd" for i in range(3)]
        for uid in uids:
            p = pod(f"p{uid[:8]}", "ml-infer", uid, labels={}, containers={"c": uid[:8] * 8})
            api.put("pods", p)
            eventually(lambda uid=uid: uid in source.meta.pods(), "seen")  # type: ignore[misc]
            api.delete("pods", p)
            eventually(lambda uid=uid: uid not in source.meta.pods(), "gone")  # type: ignore[misc]
        with caplog.at_level(logging.WARNING, logger="connectors.kube_facts"):
            batch, facts = run(source)
        assert {k for k in facts if k.endswith("/c")} == {
            "k8s:ml-infer/p00000001/c",
            "k8s:ml-infer/p00000002/c",
        }
        assert dict(batch.skipped) == {
            "pods unchanged since saved": 2, "ended pods dropped unsaved (max_ended_pods)": 1
        }  # fmt: skip
        assert batch.read == 5 and batch.accepted == 2
        assert "1 ended pods dropped" in caplog.text
    finally:
        source.close()


def test_an_unchanged_live_pod_is_described_again_every_resync_s(api: FakeKubeApi, tmp_path: Path) -> None:
    now = [0.0]
    config = KubernetesFactsConfig(name="k8s", api=str(api.kubeconfig(tmp_path)), resync_s=3600)
    source = KubernetesFactsConnector(config, clock=lambda: now[0])
    try:
        source.saved(source.facts(T0, T0))
        now[0] = 3599.0
        assert source.facts(T0, T0).workloads == []
        now[0] = 3600.0
        assert len(source.facts(T0, T0).workloads) == 12  # both pods' keys, though nothing changed
    finally:
        source.close()


def test_an_api_that_refuses_is_retried_with_its_reason(api: FakeKubeApi, tmp_path: Path) -> None:
    api.refuse = 403
    config = KubernetesFactsConfig(name="k8s", api=str(api.kubeconfig(tmp_path)), sync_timeout_s=0.5)
    source = KubernetesFactsConnector(config, options={"backoff_s": (0.01, 0.05)})
    try:
        with pytest.raises(
            RetriableError, match=r"namespaces, nodes, pods not listed within 0.5 s \(.*HTTP 403"
        ):
            source.facts(T0, T0)
        api.refuse = None
        assert len(run(source)[1]) == 12
    finally:
        source.close()


def test_configured_through_the_registry_and_refused_outside_a_cluster(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    registry = default_registry()
    config = registry.validate({"name": "k8s", "type": "kubernetes", "api": str(api.kubeconfig(tmp_path))})
    assert isinstance(config, KubernetesFactsConfig) and config.interval_s == 60.0
    source = registry.build(config)
    assert isinstance(source, KubernetesFactsConnector) and source.kind == "facts"
    source.close()
    with pytest.raises(ConfigurationError, match="kubernetes api 'in-cluster': Service host/port is not set"):
        registry.build({"name": "k8s", "type": "kubernetes"})
    with pytest.raises(ConfigurationError, match="api"):
        registry.validate({"name": "k8s", "type": "kubernetes", "api": ""})


def test_the_scheduler_runs_it_and_stops_its_watch(api: FakeKubeApi, tmp_path: Path, engine: Engine) -> None:
    """As ``gpu-ledger serve`` runs it: one task, runs every interval_s; the watch starts with the
    first run and stops with the scheduler."""
    config = KubernetesFactsConfig(name="k8s", api=str(api.kubeconfig(tmp_path)), interval_s=3600)
    source = KubernetesFactsConnector(config)
    assert not any(e.is_set() for e in source.meta.synced.values())  # built: nothing watched yet
    now = dt.datetime(2026, 11, 30, 9, 30, tzinfo=dt.UTC)
    sched = Scheduler(engine, [config], connectors={"k8s": source}, clock=lambda: now)

    async def one_run() -> None:
        await sched.start()
        for _ in range(400):
            with engine.connect() as conn:
                if conn.execute(select(ConnectorState.__table__.c.watermark)).scalar():  # type: ignore[attr-defined]
                    break
            await asyncio.sleep(0.05)
        await sched.stop()

    asyncio.run(one_run())
    with engine.connect() as conn:
        kept = conn.execute(select(WorkloadFact.__table__.c.workload_key)).scalars().all()  # type: ignore[attr-defined]
        state = conn.execute(select(ConnectorState.__table__)).one()  # type: ignore[attr-defined]
    assert (state.status, len(kept)) == ("OK", 12) and f"k8s:{POD_UID}/{TRAINER_ID[:12]}" in kept
    assert source.meta.stop_event.is_set()  # closed with the scheduler
    api.close_watches()
