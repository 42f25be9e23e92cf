"""Recorded-format GKE and Ops Agent answers (tests/fixtures/recorded/gcp, provenance in its README)
served over gRPC to the real ``MetricServiceClient``, through the real ingest, to hand-computed rows.

Project ``ml-serving-424242``, 2025-09-22 10:00–11:00 UTC, ``period_s = 60`` (ALIGN_MEAN answers,
points stamped at the end of their minute).

GKE node ``gke-l4-serving-pool-1-8c2e8cc0-dv3l`` (cluster ``l4-serving``), two L4 GPUs whose
``accelerator_id`` is their UUID:

* GPU A: pod ``serving/chat-7d9f8b6c4-x2k9q`` (container ``vllm``) 10:00–10:29 at 60 %, 20 GiB;
  pod ``batch/embed-job-4h2lm`` (``worker``) 10:30–10:49 at 100 %, 8 GiB; nothing 10:50–10:59
  (the node series alone: 0 %, 0 B).
* GPU B: the node series alone, 0 % all hour: unallocated.

GCE instance ``2718281828459045235`` (g2, two L4), Ops Agent nvml + DCGM receiver v2:

* GPU 0: ``gpu/utilization`` 75 %, ``gpu.dcgm.sm.utilization`` 0.5, memory used 16 GiB + free
  (total 23,034 MiB); energy counter read raw every minute 09:55–11:05, +4,200 J a minute (70 W).
* GPU 1: ``gpu/utilization`` 0 % 10:00–10:29, then nothing (the VM was stopped).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from gcpfake.build import plain_client, series
from gcpfake.server import FakeMetricService, running_fake
from google.cloud import monitoring_v3
from sqlalchemy import Engine, select

from connectors.gcp_monitoring import GcpMonitoringConfig, GcpMonitoringConnector
from service.ledger.ingest import ingest_window
from service.models import Device, LedgerHour

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded" / "gcp"
PROJECT = "ml-serving-424242"
H10 = dt.datetime(2025, 9, 22, 10, tzinfo=dt.UTC)
GIB = 1024**3
L4_TOTAL = 24152899584.0  # 23,034 MiB
NODE, CLUSTER = "gke-l4-serving-pool-1-8c2e8cc0-dv3l", "l4-serving"
GPU_A = "GPU-7c3a1f20-5b9e-4d6c-a8f1-2e4b6d8c0a13"
GPU_B = "GPU-e41b9d72-0c8a-4f3e-9b51-6a7c2d0e8f94"
CHAT, EMBED = "k8s:serving/chat-7d9f8b6c4-x2k9q/vllm", "k8s:batch/embed-job-4h2lm/worker"
VM = "2718281828459045235"


def _recorded(name: str) -> list[monitoring_v3.TimeSeries]:
    text = (RECORDED / name).read_text()
    return list(monitoring_v3.ListTimeSeriesResponse.from_json(text).time_series)


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    held = _recorded("gke_device_plugin_accelerator_list_time_series.json")
    held += _recorded("ops_agent_nvml_dcgm_list_time_series.json")
    with running_fake(FakeMetricService({PROJECT: held}, period_s=60)) as address:
        yield address


def _ingest(engine: Engine, target: str, families: list) -> tuple[dict, dict]:
    config = GcpMonitoringConfig(name="gcp", projects=[PROJECT], families=families)
    with plain_client(target) as client, GcpMonitoringConnector(config, client=client) as connector:
        result = ingest_window(engine, "gcp", connector, H10, H10 + dt.timedelta(hours=1))
    assert result.samples_rejected == 0 and connector.skipped_series == 0
    with engine.connect() as conn:
        rows = {
            (r["device_id"], r["workload_key"]): dict(r)
            for r in conn.execute(select(LedgerHour.__table__)).mappings()
        }
        devices = {d["device_id"]: dict(d) for d in conn.execute(select(Device.__table__)).mappings()}
    return rows, devices


def _check(row: dict, **expected: object) -> None:
    assert {k: row[k] for k in expected} == expected


def test_gke_devices_are_uuids_with_pods_as_owners(engine: Engine, target: str) -> None:
    rows, devices = _ingest(engine, target, ["gke_node", "gke_container"])
    assert set(rows) == {(GPU_A, CHAT), (GPU_A, EMBED), (GPU_A, ""), (GPU_B, "")}
    mem = {"mem_total_b": L4_TOTAL}
    # 30 min at 60 % → 1,080 busy s; 20 min at 100 % → 1,200; 10 min idle with nobody on it.
    _check(rows[GPU_A, CHAT], present_s=1800.0, observed_s=1800.0, busy_s=1080.0, idle_s=0.0,
           mem_used_max_b=20.0 * GIB, namespace="serving", workload="chat-7d9f8b6c4-x2k9q",
           **mem)  # fmt: skip
    _check(rows[GPU_A, EMBED], present_s=1200.0, observed_s=1200.0, busy_s=1200.0, idle_s=0.0,
           mem_used_max_b=8.0 * GIB, namespace="batch", workload="embed-job-4h2lm", **mem)  # fmt: skip
    _check(rows[GPU_A, ""], present_s=600.0, observed_s=600.0, busy_s=0.0, idle_s=600.0, mem_used_max_b=0.0)
    _check(rows[GPU_B, ""], present_s=3600.0, observed_s=3600.0, busy_s=0.0, idle_s=3600.0, **mem)
    # One physical GPU-hour each: the pods' readings replaced the node's, never added to them.
    assert sum(r["present_s"] for (d, _), r in rows.items() if d == GPU_A) == 3600.0
    for uuid in (GPU_A, GPU_B):
        d = devices[uuid]
        assert (d["node"], d["cluster"], d["region"], d["account"]) == (NODE, CLUSTER, "us-central1", PROJECT)
        assert (d["gpu_model"], d["gpu_index"], d["instance_id"]) == ("NVIDIA L4", None, None)


def test_ops_agent_vm_gpus_by_number_with_measured_energy(engine: Engine, target: str) -> None:
    rows, devices = _ingest(engine, target, ["ops_agent", "dcgm"])
    gpu0, gpu1 = f"{VM}/gpu0", f"{VM}/gpu1"
    assert set(rows) == {(gpu0, ""), (gpu1, "")}
    # SM activity 50 % is the default metric; nvml 75 % is gpu_util; 60 counter deltas × 4,200 J.
    _check(rows[gpu0, ""], present_s=3600.0, observed_s=3600.0, default_metric="sm_active", busy_s=1800.0,
           busy_s_gpu_util=2700.0, energy_j=252_000.0, energy_estimated=False, mem_used_max_b=16.0 * GIB,
           mem_total_b=L4_TOTAL)  # fmt: skip
    # Reported 10:00–10:29, then stopped: present only while it reported, idle all that time.
    _check(rows[gpu1, ""], present_s=1800.0, observed_s=1800.0, default_metric="gpu_util", busy_s=0.0,
           idle_s=1800.0, energy_j=None, mem_total_b=L4_TOTAL)  # fmt: skip
    for n, device in ((0, gpu0), (1, gpu1)):
        d = devices[device]
        assert (d["instance_id"], d["gpu_index"], d["gpu_model"], d["region"]) == (
            VM,
            n,
            "NVIDIA L4",
            "us-central1",
        )


def test_a_gke_series_without_accelerator_id_is_skipped_and_counted() -> None:
    ends = [H10 + dt.timedelta(minutes=m + 1) for m in range(3)]
    node = {"project_id": PROJECT, "location": "us-central1", "cluster_name": CLUSTER, "node_name": NODE}
    held = [
        series("kubernetes.io/node/accelerator/duty_cycle", node, {"make": "nvidia", "model": "NVIDIA L4"},
               ends, [50.0] * 3, resource_type="k8s_node"),
        series("kubernetes.io/node/accelerator/duty_cycle", node, {"make": "nvidia", "model": "NVIDIA L4",
               "accelerator_id": GPU_B}, ends, [50.0] * 3, resource_type="k8s_node"),
    ]  # fmt: skip
    config = GcpMonitoringConfig(name="gcp", projects=[PROJECT], families=["gke_node"])
    with (
        running_fake(FakeMetricService({PROJECT: held}, period_s=60)) as address,
        plain_client(address) as client,
        GcpMonitoringConnector(config, client=client) as connector,
    ):
        batches = list(connector.collect(H10, H10 + dt.timedelta(minutes=5)))
    assert connector.skipped_series == 1
    assert [d.device_id for b in batches for d in b.devices] == [GPU_B]
    assert sum(b.samples.height for b in batches) == 3
