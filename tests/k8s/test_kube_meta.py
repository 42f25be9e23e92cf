"""KubeMetadata: the official client's list+watch against a local fake API server."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import connectors.kube_meta as kube_meta
from connectors.kube_meta import KubeMetadata, PodMeta
from tests.k8s.fake_kube_api import FakeKubeApi, fake_kube_api
from tests.k8s.objects import INIT_ID, NODE, POD_UID, SIDECAR_ID, TRAINER_ID, namespace, node, pod


def eventually(condition: Callable[[], object], what: str) -> None:
    """Wait for a watch to deliver (no timing is asserted: 20 s only bounds a broken test)."""
    end = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < end, f"never: {what}"
        time.sleep(0.02)


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with fake_kube_api() as api:
        api.put("pods", pod())
        api.put("pods", pod("other-node-pod", uid="11111111-2222-4333-8444-555555555555", node="gpu-node-3"))
        api.put("namespaces", namespace("ml-research", {"team": "nlp", "cost-center": "cc-4711"}))
        api.put("namespaces", namespace("kube-system", {}))
        api.put("nodes", node())
        api.put("nodes", node("gpu-node-3", {"pool": "b"}))
        yield api


@pytest.fixture
def meta(api: FakeKubeApi, tmp_path: Path) -> Iterator[KubeMetadata]:
    m = KubeMetadata.connect(str(api.kubeconfig(tmp_path)), NODE, backoff_s=(0.01, 0.05))
    m.start()
    try:
        yield m
    finally:
        m.stop()
        api.close_watches()


def synced(m: KubeMetadata) -> None:
    eventually(lambda: all(e.is_set() for e in m.synced.values()), "listed")


def test_lists_this_nodes_pods_every_namespace_and_this_node(api: FakeKubeApi, meta: KubeMetadata) -> None:
    synced(meta)
    assert meta.pod(POD_UID) == PodMeta(
        "ml-research",
        "bert-train-0",
        {"app.kubernetes.io/name": "bert", "team": "nlp", "controller-revision-hash": "bert-train-6b9c7d"},
        {INIT_ID: "fetch-weights", TRAINER_ID: "trainer", SIDECAR_ID: "log-shipper"},
        node=NODE,
    )
    assert meta.pod("11111111-2222-4333-8444-555555555555") is None  # another node's pod
    assert meta.namespace_labels("ml-research") == {
        "kubernetes.io/metadata.name": "ml-research", "team": "nlp", "cost-center": "cc-4711"
    }  # fmt: skip
    assert meta.namespace_labels("absent") == {}
    assert meta.node_labels()["node.kubernetes.io/instance-type"] == "p5e.48xlarge"
    selectors = {path: q.get("fieldSelector") for path, q in api.requests}
    assert selectors == {"/api/v1/pods": f"spec.nodeName={NODE}", "/api/v1/namespaces": None,
                         "/api/v1/nodes": f"metadata.name={NODE}"}  # fmt: skip


def test_watch_events_change_the_cache(api: FakeKubeApi, meta: KubeMetadata) -> None:
    synced(meta)
    api.put("namespaces", namespace("ml-research", {"team": "vision"}))
    eventually(lambda: meta.namespace_labels("ml-research").get("team") == "vision", "namespace relabelled")
    new = pod("llama-0", "ml-infer", "99999999-aaaa-4bbb-8ccc-dddddddddddd", labels={"app": "llama"},
              containers={"server": "ef" * 32})  # fmt: skip
    api.put("pods", new)
    eventually(lambda: meta.pod("99999999-aaaa-4bbb-8ccc-dddddddddddd") is not None, "pod added")
    api.delete("pods", pod())
    eventually(lambda: meta.pod(POD_UID) is None, "pod deleted")
    assert api.lists("pods") == 1  # one list, then watching only
    watches = [q for path, q in api.requests if path == "/api/v1/pods" and q.get("watch") == "true"]
    assert watches[0]["allowWatchBookmarks"] == "true" and watches[0]["resourceVersion"] == "1006"


def test_a_watch_ended_by_the_server_resumes_from_the_last_version(
    api: FakeKubeApi, meta: KubeMetadata
) -> None:
    synced(meta)
    api.put("nodes", node(labels={"pool": "a"}))
    eventually(lambda: meta.node_labels() == {"pool": "a"}, "node relabelled")
    api.close_watches()  # the server's timeoutSeconds ran out
    api.put("nodes", node(labels={"pool": "c"}))
    eventually(lambda: meta.node_labels() == {"pool": "c"}, "seen after re-watching")
    assert api.lists("nodes") == 1
    versions = [q["resourceVersion"] for p, q in api.requests if p == "/api/v1/nodes" and q.get("watch")]
    assert versions[:2] == ["1006", "1007"]


def test_410_gone_relists(api: FakeKubeApi, meta: KubeMetadata, caplog: pytest.LogCaptureFixture) -> None:
    synced(meta)
    with caplog.at_level(logging.INFO, logger="connectors.kube_meta"):
        api.put("namespaces", namespace("ml-research", {"team": "speech"}))
        eventually(lambda: meta.namespace_labels("ml-research").get("team") == "speech", "seen")
        api.compact()  # the versions we hold are compacted away...
        api.close_watches()  # ...so the next watch gets an ERROR event with code 410
        api.put("namespaces", namespace("ml-research", {"team": "audio"}))
        eventually(lambda: api.lists("namespaces") == 2, "listed again")
        eventually(lambda: meta.namespace_labels("ml-research").get("team") == "audio", "relisted state")
    assert any("410" in r.getMessage() for r in caplog.records)


def test_lists_page_by_continue(api: FakeKubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube_meta, "PAGE", 2)
    for i in range(5):
        api.put("namespaces", namespace(f"team-{i}", {"n": str(i)}))
    m = KubeMetadata.connect(str(api.kubeconfig(tmp_path)), NODE)
    m.start()
    try:
        synced(m)
        assert [m.namespace_labels(f"team-{i}")["n"] for i in range(5)] == ["0", "1", "2", "3", "4"]
        pages = [
            q.get("continue") for p, q in api.requests if p == "/api/v1/namespaces" and not q.get("watch")
        ]
        assert pages == [None, "2", "4", "6"]
    finally:
        m.stop()
        api.close_watches()


@pytest.mark.parametrize("refusal", ["unreachable", 403, 500])
def test_an_api_that_fails_is_logged_once_and_lookups_answer_nothing(
    api: FakeKubeApi, tmp_path: Path, refusal: object, caplog: pytest.LogCaptureFixture
) -> None:
    if refusal == "unreachable":
        api.stop()  # nothing listens on its port any more
    else:
        api.refuse = refusal  # type: ignore[assignment]
    m = KubeMetadata.connect(str(api.kubeconfig(tmp_path)), NODE, request_timeout_s=2, backoff_s=(0.01, 0.02))
    with caplog.at_level(logging.WARNING, logger="connectors.kube_meta"):
        m.start()
        try:
            eventually(lambda: len(api.requests) >= 9 or refusal == "unreachable", "retried")
            time.sleep(0.2)  # several more retries: still one line per loop
            assert (
                m.pod(POD_UID) is None and m.namespace_labels("ml-research") == {} and m.node_labels() == {}
            )
        finally:
            m.stop()
    lines = sorted(r.getMessage().split(":")[1].strip() for r in caplog.records)
    assert lines == ["namespaces", "nodes", "pods"]  # one warning per watch loop, however many tries
    if refusal != "unreachable":
        assert all(f"HTTP {refusal}" in r.getMessage() for r in caplog.records)


def test_garbage_in_a_watch_stream_is_skipped(api: FakeKubeApi, meta: KubeMetadata) -> None:
    synced(meta)
    api.inject("namespaces", "<html>502 Bad Gateway</html>")
    api.inject("namespaces", '{"type": "ADDED", "object": "not an object"}')
    api.inject("namespaces", '["a", "list"]')
    api.put("namespaces", namespace("ml-research", {"team": "after-garbage"}))
    eventually(
        lambda: meta.namespace_labels("ml-research").get("team") == "after-garbage", "seen after garbage"
    )
    assert api.lists("namespaces") == 1  # the watch went on


def test_a_list_answer_that_is_no_list_is_logged_once(
    api: FakeKubeApi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api.garbage = b'{"kind": "Status", "items": "nope"}'
    m = KubeMetadata.connect(str(api.kubeconfig(tmp_path)), NODE, backoff_s=(0.01, 0.02))
    with caplog.at_level(logging.WARNING, logger="connectors.kube_meta"):
        m.start()
        try:
            eventually(lambda: api.lists("pods") >= 3, "retried")
            api.garbage = b"\xff\xfe not json"
            eventually(lambda: api.lists("pods") >= 6, "retried")
            assert m.pod(POD_UID) is None
            api.garbage = None
            eventually(lambda: m.pod(POD_UID) is not None, "recovered")
        finally:
            m.stop()
            api.close_watches()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sorted(w.split(":")[1].strip() for w in warned) == ["namespaces", "nodes", "pods"]
    assert any("without items" in w for w in warned)


def test_garbage_objects_are_skipped() -> None:
    assert kube_meta.pod_meta({"metadata": {"name": "x"}}) is None  # no uid
    odd = {
        "metadata": {"uid": "u", "namespace": "n", "name": "p", "labels": ["bad"]},
        "status": {
            "containerStatuses": [
                {"name": "c", "containerID": None},
                {"name": "d", "containerID": "cri-o://ab"},
                # restarted: the container it replaced is the same name's too
                {
                    "name": "e",
                    "containerID": "cri-o://cd",
                    "lastState": {"terminated": {"containerID": "cri-o://ef"}},
                },
            ]
        },
        "spec": {"nodeName": 17},
    }
    uid, meta = kube_meta.pod_meta(odd) or ("", None)
    assert (uid, meta) == ("u", PodMeta("n", "p", {}, {"ab": "d", "ef": "e", "cd": "e"}))


def test_in_cluster_outside_a_cluster_is_a_clear_error() -> None:
    from kubernetes.config.config_exception import ConfigException

    with pytest.raises(ConfigException, match="Service host/port is not set"):
        KubeMetadata.connect("in-cluster", NODE)
