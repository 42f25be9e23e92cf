"""The node agent on a containerd node: NVML (the fake libnvidia-ml.so.1), the host's /proc (a fake
tree), the kubelet's pod-resources API (fake kubelet, real proto over gRPC) and the API server
(fake, through the official client) — built by the agent's own loader from its config, then a
reading spooled and parsed by the service's push parser."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nvml.fake_nvml_lib import FakeNvml, make_fake, session_libs
from nvml.h200_replay import h200, state

from connectors.sdk import WorkloadInfo
from service.agent.config import AgentSettings
from service.agent.kube import KubeSampler
from service.agent.sampler import load_sampler
from service.agent.spool import Spool
from service.push_batch import parse_batch
from tests.k8s.fake_kube_api import FakeKubeApi, fake_kube_api
from tests.k8s.fake_kubelet import FakeKubelet, fake_kubelet, pod
from tests.k8s.fake_nvml_sampler import FAKE
from tests.k8s.objects import NODE, POD_UID, TRAINER_ID, namespace, node
from tests.k8s.objects import pod as api_pod
from tests.k8s.test_kube_meta import eventually

GPU0 = "GPU-fbd3d301-eb3f-2053-443c-7eabc01e7a09"  # the probe's H200 (h200(0))
GPU1 = "GPU-00000000-0000-0000-0000-000000000001"
GPU2 = "GPU-00000000-0000-0000-0000-000000000002"
LLAMA_UID = "99999999-aaaa-4bbb-8ccc-dddddddddddd"
SERVER_ID = "ef" * 32


@pytest.fixture(scope="session")
def nvml_libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return session_libs(tmp_path_factory)


@pytest.fixture
def nvml(nvml_libs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNvml]:
    fake = make_fake(nvml_libs["full"], tmp_path, monkeypatch)
    # GPU0: the trainer's process (pid 4242); GPU1: allocated to llama-0 but idle; GPU2: free.
    fake.write(state(h200(0, procs="4242:2147483648", util_gpu=87), h200(1), h200(2)))
    FAKE["nvml"] = fake
    yield fake
    FAKE.clear()


def host_proc(root: Path) -> Path:
    """pid 4242 in the trainer container of bert-train-0 (systemd driver, containerd)."""
    d = root / "proc" / "4242"
    d.mkdir(parents=True)
    uid_ = POD_UID.replace("-", "_")
    (d / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/"
        f"cri-containerd-{TRAINER_ID}.scope\n"
    )
    (d / "comm").write_text("python\n")
    (d / "status").write_text("Name:\tpython\nPid:\t4242\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n")
    return root / "proc"


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    from connectors.podresources import api_pb2

    with fake_kubelet() as k:
        k.answer = api_pb2.ListPodResourcesResponse(
            pod_resources=[
                pod(
                    "ml-research",
                    "bert-train-0",
                    ("trainer", {"nvidia.com/gpu": [GPU0]}),
                    ("log-shipper", {}),
                ),
                pod("ml-infer", "llama-0", ("server", {"nvidia.com/gpu": [GPU1]})),
            ]
        )
        yield k


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with fake_kube_api() as api:
        api.put("pods", api_pod())  # bert-train-0: labels team=nlp, app.kubernetes.io/name=bert
        api.put("pods", api_pod("llama-0", "ml-infer", LLAMA_UID, labels={"gpu-ledger.project": "chat"},
                                containers={"server": SERVER_ID}))  # fmt: skip
        api.put("namespaces", namespace("ml-research", {"cost-center": "cc-4711"}))
        api.put("namespaces", namespace("ml-infer", {"cost-center": "cc-0815"}))
        api.put("nodes", node())
        yield api


@pytest.fixture(autouse=True)
def stop_watchers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every sampler's API watch loops end with its test (they are daemon threads)."""
    built: list[KubeSampler] = []
    original = KubeSampler.__init__

    def remember(self: KubeSampler, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(KubeSampler, "__init__", remember)
    yield
    for sampler in built:
        if sampler.meta is not None:
            sampler.meta.stop()
        if sampler.pod_resources is not None:
            sampler.pod_resources.close()


def settings(tmp_path: Path, **keys: Any) -> AgentSettings:
    return AgentSettings(
        service_url="http://127.0.0.1:9",
        token="t" * 20,
        name="gpu-nodes",
        agent_id="n17",
        spool_dir=tmp_path / "spool",
        source="tests.k8s.fake_nvml_sampler:FakeNvmlSampler",
        source_options={"node": NODE},
        docker_socket=None,
        proc_root=host_proc(tmp_path),
        kubernetes_node=NODE,
        **keys,
    )


def pushed(batch: Any, tmp_path: Path) -> Any:
    """The batch as the agent ships it, parsed by the service (its 200-fact, 300-character bounds)."""
    spool = Spool(tmp_path / "out", "n17", "gpu-nodes", fsync=False)
    spool.append(batch)
    sealed = spool.seal()
    assert sealed is not None
    return parse_batch(json.dumps(spool.payload(sealed)).encode())


def shares(batch: Any, metric: str = "gpu_util") -> dict[tuple[str, str], float]:
    c = batch.columns
    rows = zip(c["device_id"], c["metric"], c["workload_key"], c["share"], strict=True)
    return {(d, k): s for d, m, k, s in rows if m == metric}


def test_a_containerd_pod_is_named_and_labelled(
    nvml: FakeNvml, kubelet: FakeKubelet, api: FakeKubeApi, tmp_path: Path
) -> None:
    sampler = load_sampler(settings(tmp_path, pod_resources_socket=kubelet.socket,
                                    kubernetes_api=str(api.kubeconfig(tmp_path))))  # fmt: skip
    assert isinstance(sampler, KubeSampler) and sampler.meta is not None
    eventually(lambda: all(e.is_set() for e in sampler.meta.synced.values()), "listed")  # type: ignore[union-attr]
    batch = sampler.sample()
    assert shares(batch) == {
        (GPU0, "k8s:ml-research/bert-train-0/trainer"): 1.0,
        (GPU1, "k8s:ml-infer/llama-0/server"): 1.0,  # idle, but llama-0 holds it
        (GPU2, ""): 1.0,
    }
    workloads = {w.workload_key: w for w in batch.workloads}
    assert workloads["k8s:ml-research/bert-train-0/trainer"] == WorkloadInfo(
        "k8s:ml-research/bert-train-0/trainer",
        team="nlp",  # the pod's `team` label, as a Docker label would name it
        namespace="ml-research",
        workload="bert-train-0",
        facts={
            "k8s.namespace": "ml-research",
            "k8s.pod": "bert-train-0",
            "k8s.container": "trainer",
            "k8s.pod_label:app.kubernetes.io/name": "bert",
            "k8s.pod_label:controller-revision-hash": "bert-train-6b9c7d",
            "k8s.pod_label:team": "nlp",
            "k8s.namespace_label:cost-center": "cc-4711",
            "k8s.namespace_label:kubernetes.io/metadata.name": "ml-research",
        },
    )
    llama = workloads["k8s:ml-infer/llama-0/server"]
    assert (llama.project, llama.facts["k8s.namespace_label:cost-center"]) == ("chat", "cc-0815")
    assert all(
        d.tags["k8s.node_label:node.kubernetes.io/instance-type"] == "p5e.48xlarge" for d in batch.devices
    )
    parsed = pushed(batch, tmp_path)
    assert {w.workload_key: w.facts for w in parsed.workloads}["k8s:ml-research/bert-train-0/trainer"][
        "k8s.namespace_label:cost-center"
    ] == "cc-4711"
    assert parsed.devices[0].tags["k8s.node_label:nvidia.com/gpu.product"] == "NVIDIA-H200"


def test_pod_resources_alone_names_the_pod_of_the_only_holder(
    nvml: FakeNvml, kubelet: FakeKubelet, tmp_path: Path
) -> None:
    sampler = load_sampler(settings(tmp_path, pod_resources_socket=kubelet.socket))
    batch = sampler.sample()
    assert shares(batch) == {
        (GPU0, "k8s:ml-research/bert-train-0/trainer"): 1.0,  # not k8s:<pod-uid>/<container-id>
        (GPU1, "k8s:ml-infer/llama-0/server"): 1.0,
        (GPU2, ""): 1.0,
    }
    w = {w.workload_key: w for w in batch.workloads}["k8s:ml-research/bert-train-0/trainer"]
    assert w.facts == {"k8s.namespace": "ml-research", "k8s.pod": "bert-train-0", "k8s.container": "trainer"}
    assert all(d.tags == {} for d in batch.devices)
    pushed(batch, tmp_path)


def test_without_kubernetes_the_pod_is_its_uid_and_nothing_kubernetes_is_loaded(
    nvml: FakeNvml, tmp_path: Path
) -> None:
    sampler = load_sampler(settings(tmp_path))
    assert not isinstance(sampler, KubeSampler)
    assert shares(sampler.sample())[(GPU0, f"k8s:{POD_UID}/{TRAINER_ID[:12]}")] == 1.0


def test_time_sliced_idle_gpu_is_split_between_its_holders(
    nvml: FakeNvml, kubelet: FakeKubelet, tmp_path: Path
) -> None:
    from connectors.podresources import api_pb2

    kubelet.answer = api_pb2.ListPodResourcesResponse(
        pod_resources=[
            pod("nb", "alice", ("lab", {"nvidia.com/gpu": [f"{GPU2}::0"]})),
            pod("nb", "bob", ("lab", {"nvidia.com/gpu": [f"{GPU2}::1"]})),
        ]
    )
    batch = load_sampler(settings(tmp_path, pod_resources_socket=kubelet.socket)).sample()
    got = shares(batch)
    assert (got[(GPU2, "k8s:nb/alice/lab")], got[(GPU2, "k8s:nb/bob/lab")]) == (0.5, 0.5)
    assert got[(GPU0, f"k8s:{POD_UID}/{TRAINER_ID[:12]}")] == 1.0  # GPU0 held by nobody now: the UID
    pushed(batch, tmp_path)


@pytest.mark.parametrize("failure", ["no socket", "garbage", "api unreachable"])
def test_the_agent_keeps_sampling_when_kubernetes_fails(
    nvml: FakeNvml, kubelet: FakeKubelet, api: FakeKubeApi, tmp_path: Path, failure: str,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    keys: dict[str, Any] = {"pod_resources_socket": kubelet.socket, "pod_resources_every_s": 0.001}
    if failure == "no socket":
        keys["pod_resources_socket"] = tmp_path / "absent.sock"
    elif failure == "garbage":
        kubelet.answer = b"\x08\x96\x01garbage"
    else:
        keys["kubernetes_api"] = str(api.kubeconfig(tmp_path))
        keys.pop("pod_resources_socket")
        api.stop()
    with caplog.at_level(logging.WARNING):
        sampler = load_sampler(settings(tmp_path, **keys))
        for _ in range(4):
            batch = sampler.sample()
            assert shares(batch)[(GPU0, f"k8s:{POD_UID}/{TRAINER_ID[:12]}")] == 1.0  # still sampled
        if isinstance(sampler, KubeSampler) and sampler.meta is not None:
            eventually(lambda: len(caplog.records) >= 3, "the three loops' warnings")
    ours = [r for r in caplog.records if r.name.startswith("connectors.kube")]
    assert len(ours) == (3 if failure == "api unreachable" else 1)  # once, not once per tick


def test_a_missing_extra_or_bad_kubeconfig_is_a_start_error(tmp_path: Path, nvml: FakeNvml) -> None:
    with pytest.raises(ValueError, match=r"kubernetes_api '.*absent': .*"):
        load_sampler(settings(tmp_path, kubernetes_api=str(tmp_path / "absent")))
