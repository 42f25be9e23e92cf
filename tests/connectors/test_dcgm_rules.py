"""dcgm's label and MIG rules one at a time, on series as small as each rule needs."""

from __future__ import annotations

import datetime as dt
import json

import httpx
import numpy as np
import pytest

from connectors.dcgm import Series, Stamp, to_batch
from connectors.prometheus import PrometheusConfig, PrometheusConnector

EMPTY = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}})
T0 = dt.datetime(2026, 11, 30, 10, tzinfo=dt.UTC)


def _s(field: str, value: float, **labels: str) -> Series:
    return Series(field, {"UUID": "GPU-x", "modelName": "NVIDIA H100 80GB HBM3", **labels},
                  np.array([1000]), np.array([value]))  # fmt: skip


def _rows(batch) -> list[tuple]:  # noqa: ANN001
    return (
        batch.samples.sort("device_id", "metric", "workload_key")
        .select("device_id", "metric", "value", "workload_key", "share")
        .rows()
    )


def test_mig_gpu_series_wins_over_the_instances_copies() -> None:
    """With ``-d a`` the GPU's own series reports beside its instances: that one is the GPU's value."""
    gi = {"GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb"}
    batch = to_batch(
        [_s("DCGM_FI_DEV_POWER_USAGE", 700.0), _s("DCGM_FI_DEV_POWER_USAGE", 699.0, **gi)], Stamp()
    )
    assert _rows(batch) == [("MIG-GPU-x-1", "power_w", 300.0, "", 1.0)]
    # Without it, the instances' largest copy: never their sum.
    gi2 = {"GPU_I_ID": "2", "GPU_I_PROFILE": "4g.40gb"}
    batch = to_batch(
        [_s("DCGM_FI_DEV_POWER_USAGE", 693.0, **gi), _s("DCGM_FI_DEV_POWER_USAGE", 700.0, **gi2)], Stamp()
    )
    assert _rows(batch) == [
        ("MIG-GPU-x-1", "power_w", 300.0, "", 1.0),
        ("MIG-GPU-x-2", "power_w", 400.0, "", 1.0),
    ]


@pytest.mark.parametrize(
    ("labels", "node"),
    [
        (
            {"node": "n1", "kubernetes_node": "n2", "NODE_NAME": "n3", "hostname": "n4", "Hostname": "n5"},
            "n1",
        ),
        ({"kubernetes_node": "n2", "NODE_NAME": "n3", "hostname": "n4"}, "n2"),
        ({"NODE_NAME": "n3", "hostname": "n4", "Hostname": "n5"}, "n3"),
        ({"hostname": "gpu-node-7", "Hostname": "n5"}, "gpu-node-7"),  # main (#655): NODE_NAME
        ({"Hostname": "gpu-node-7"}, "gpu-node-7"),  # ≤ 4.8 (since #129): NODE_NAME
        ({"Hostname": "nvidia-dcgm-exporter-7xk2p"}, None),  # before #129: the exporter's pod
        ({"hostname": "dcgm-exporter-5fx2k", "Hostname": "bm-01"}, "bm-01"),
    ],
)
def test_node_label_precedence(labels: dict[str, str], node: str | None) -> None:
    (device,) = to_batch([_s("DCGM_FI_DEV_GPU_UTIL", 1.0, **labels)], Stamp()).devices
    assert device.node == node


def test_honor_labels_false_without_an_exporter_name_pattern() -> None:
    """A ``pod`` beside ``exported_pod`` is the scrape target's: on an idle GPU it owns nothing."""
    target = {"pod": "gpu-metrics-abcde", "namespace": "monitoring", "container": "exporter"}
    busy = _s("DCGM_FI_DEV_GPU_UTIL", 90.0, **target, exported_pod="train-0", exported_namespace="ml",
              exported_container="pytorch")  # fmt: skip
    idle = Series("DCGM_FI_DEV_GPU_UTIL", {"UUID": "GPU-y", **target}, np.array([1000]), np.array([0.0]))
    batch = to_batch([busy, idle], Stamp(exporter_pod_pattern=""))
    assert dict(batch.samples.select("device_id", "workload_key").rows()) == {
        "GPU-x": "k8s:ml/train-0/pytorch",
        "GPU-y": "",
    }
    # Alone, the idle GPU's target pod would look like a workload: the name pattern catches that.
    assert to_batch([idle], Stamp(exporter_pod_pattern="gpu-metrics")).samples["workload_key"].to_list() == [
        ""
    ]


def test_a_site_relabeling_pod_labels_elsewhere() -> None:
    config = PrometheusConfig(
        name="p", url="http://p", pod_labels=[["k8s_ns", "k8s_pod", "k8s_container"]], exporter_pod_pattern=""
    )
    series = _s("DCGM_FI_DEV_GPU_UTIL", 5.0, pod="ignored", k8s_ns="a", k8s_pod="b", k8s_container="c")
    batch = to_batch([series], config.stamp())
    assert batch.samples["workload_key"].to_list() == ["k8s:a/b/c"]
    with pytest.raises(ValueError, match="exporter_pod_pattern"):
        PrometheusConfig(name="p", url="http://p", exporter_pod_pattern="(")


def test_time_shared_gpu_splits_evenly_without_process_utilization() -> None:
    """Pods whose processes read 0 (or pages of copies, before per-process fields) share evenly;
    the device-level line is the device, never a third, unallocated owner."""
    a = {"pod": "a", "namespace": "n", "container": "c", "vgpu": "0"}
    b = {"pod": "b", "namespace": "n", "container": "c", "vgpu": "1"}
    batch = to_batch(
        [
            _s("DCGM_FI_DEV_GPU_UTIL", 40.0),
            _s("DCGM_FI_DEV_GPU_UTIL", 0.0, **a),
            _s("DCGM_FI_DEV_GPU_UTIL", 0.0, **b),
            _s("DCGM_FI_DEV_POWER_USAGE", 300.0, **a),
            _s("DCGM_FI_DEV_POWER_USAGE", 300.0, **b),
        ],
        Stamp(),
    )
    assert _rows(batch) == [
        ("GPU-x", "gpu_util", 40.0, "k8s:n/a/c", 0.5),
        ("GPU-x", "gpu_util", 40.0, "k8s:n/b/c", 0.5),
        ("GPU-x", "power_w", 300.0, "k8s:n/a/c", 0.5),
        ("GPU-x", "power_w", 300.0, "k8s:n/b/c", 0.5),
    ]


class GridPrometheus(PrometheusConnector):
    """The ``last_over_time`` grid the cloud subclasses read (``raw_samples`` False); the raw
    protocol's case rule is tested in tests/prom/test_prom_raw_http.py."""


def test_lowercase_names_are_asked_again_and_a_hint_when_nothing_matched() -> None:
    queries: list[str] = []
    one = {
        "status": "success",
        "data": {"resultType": "matrix",
                 "result": [{"metric": {"UUID": "GPU-1"}, "values": [[T0.timestamp(), "0.5"]]}]},
    }  # fmt: skip

    def answer(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        queries.append(query)
        found = "(?i)DCGM_FI_PROF_GR_ENGINE_ACTIVE" in query or "(?i)DCGM_FI_DEV_GPU_UTIL" in query
        return httpx.Response(200, text=json.dumps(one) if found else EMPTY)

    config = PrometheusConfig(name="p", url="http://prom", label_selector='{job="lower"}')
    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        connector = GridPrometheus(config, client=client)
        (batch,) = list(connector.collect(T0, T0 + dt.timedelta(minutes=1)))
    assert batch.samples.select("metric", "value").rows() == [("gpu_util", 0.5)]  # full GPU: GPU_UTIL ×1
    assert 'last_over_time({__name__=~"(?i)DCGM_FI_DEV_GPU_UTIL", job="lower"}[15000ms])' in queries
    assert connector.missing_data_hint is None

    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, text=EMPTY))) as client:
        connector = GridPrometheus(config, client=client)
        assert list(connector.collect(T0, T0 + dt.timedelta(hours=1))) == []
    assert connector.missing_data_hint is not None
    assert (
        '{job="lower"}' in connector.missing_data_hint
        and "2026-11-30T10:00:00Z" in connector.missing_data_hint
    )
