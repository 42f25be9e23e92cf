"""PodResources against a fake kubelet serving the real pod-resources v1 proto over a unix socket."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from connectors.kube_podresources import PodContainer, PodResources
from connectors.podresources import api_pb2
from tests.k8s.fake_kubelet import FakeKubelet, fake_kubelet, pod

GPU0 = "GPU-fbd3d301-eb3f-2053-443c-7eabc01e7a09"
GPU1 = "GPU-0c7a2b7e-9f1d-4e55-b1c2-6a4f3e2d1c0b"
MIG = "MIG-7c2a1e4d-3b5f-5a6e-9d8c-1f2e3d4c5b6a"

ANSWER = api_pb2.ListPodResourcesResponse(
    pod_resources=[
        pod("ml-research", "bert-train-0", ("trainer", {"nvidia.com/gpu": [GPU0]}), ("sidecar", {})),
        pod("ml-infer", "llama-0", ("server", {"nvidia.com/mig-1g.18gb": [MIG]})),
        # time-slicing: GPU1 advertised as replicas, two containers share it
        pod("notebooks", "alice-nb", ("lab", {"nvidia.com/gpu": [f"{GPU1}::0"]})),
        pod("notebooks", "bob-nb", ("lab", {"nvidia.com/gpu": [f"{GPU1}::3", f"{GPU1}::4"]})),
        pod("kube-system", "coredns-5d78c9869d-x2x8q", ("coredns", {})),
    ]
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def kubelet() -> FakeKubelet:
    with fake_kubelet() as k:
        k.answer = ANSWER
        yield k


def test_holders_by_gpu_mig_and_time_sliced_replicas(kubelet: FakeKubelet) -> None:
    reader = PodResources(kubelet.socket)
    try:
        assert reader.holders(GPU0) == (PodContainer("ml-research", "bert-train-0", "trainer"),)
        assert reader.holders(MIG) == (PodContainer("ml-infer", "llama-0", "server"),)
        assert reader.holders(GPU1) == (
            PodContainer("notebooks", "alice-nb", "lab"),
            PodContainer("notebooks", "bob-nb", "lab"),  # two replicas, one holder
        )
        assert reader.holders("GPU-unknown") == ()
        assert set(reader.allocations()) == {GPU0, GPU1, MIG}
    finally:
        reader.close()


def test_answers_are_kept_for_every_s(kubelet: FakeKubelet) -> None:
    clock = Clock()
    reader = PodResources(kubelet.socket, every_s=10, clock=clock)
    try:
        for _ in range(5):
            reader.holders(GPU0)
        assert kubelet.calls == 1
        kubelet.answer = api_pb2.ListPodResourcesResponse()  # the pod ended
        clock.now += 9.9
        assert reader.holders(GPU0) != ()
        clock.now += 0.1
        assert reader.holders(GPU0) == () and kubelet.calls == 2
    finally:
        reader.close()


def test_missing_socket_is_logged_once_then_the_kubelet_comes(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    with fake_kubelet() as kubelet:
        kubelet.answer = ANSWER
        reader = PodResources(kubelet.socket.with_name("absent.sock"), every_s=1, clock=clock)
        with caplog.at_level(logging.INFO, logger="connectors.kube_podresources"):
            for _ in range(5):
                assert reader.holders(GPU0) == ()
                clock.now += 1
            warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert len(warnings) == 1 and "absent.sock" in warnings[0] and "no socket" in warnings[0]
            reader.socket = kubelet.socket
            assert reader.holders(GPU0) == (PodContainer("ml-research", "bert-train-0", "trainer"),)
        assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO]
        reader.close()


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (b"\xff\xff\xff\xff", "INTERNAL"),  # not a ListPodResourcesResponse
        (b"\x0a\x05\x0a\x03", "INTERNAL"),  # a truncated one
        ("hang", "DEADLINE_EXCEEDED"),
        (grpc.StatusCode.UNIMPLEMENTED, "UNIMPLEMENTED"),  # a kubelet without v1
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED"),
    ],
)
def test_a_kubelet_answering_garbage_or_nothing_leaves_nothing_known(
    kubelet: FakeKubelet, answer: object, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    reader = PodResources(kubelet.socket, timeout_s=0.3, every_s=1, clock=clock)
    try:
        assert reader.holders(GPU0) != ()
        kubelet.answer = answer
        with caplog.at_level(logging.WARNING, logger="connectors.kube_podresources"):
            for _ in range(3):
                clock.now += 1
                assert reader.holders(GPU0) == ()  # no stale answer: keyed by UID meanwhile
        assert len(caplog.records) == 1 and said in caplog.records[0].getMessage()
        kubelet.answer = ANSWER
        clock.now += 1
        assert reader.holders(GPU0) != ()
    finally:
        reader.close()


def test_grpc_is_not_imported_until_the_kubelet_is_asked() -> None:
    code = (
        "import sys\nimport connectors.kube_podresources as k\n"
        "print(sorted(m for m in ('grpc', 'google.protobuf') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).parents[2])  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
