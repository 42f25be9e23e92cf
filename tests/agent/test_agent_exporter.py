"""The agent's /metrics: dcgm-exporter names, units and labels, read back with the Prometheus parser."""

from __future__ import annotations

import datetime as dt

import httpx
import polars as pl
from agent_fakes import FakeClock, FakeSampler
from prometheus_client.parser import text_string_to_metric_families

from connectors.base import DeviceInfo, SampleBatch
from service.agent.exporter import DcgmExporter

T0 = dt.datetime(2025, 9, 10, tzinfo=dt.UTC)


def _families(exporter: DcgmExporter) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(exporter.render().decode()):
        out[family.name] = [(s.labels, s.value) for s in family.samples]
        assert family.type == ("counter" if family.name.endswith("ENERGY_CONSUMPTION") else "gauge")
    return out


def test_latest_reading_with_dcgm_names_units_and_labels() -> None:
    clock = FakeClock(T0)
    sampler = FakeSampler(clock, n=2)
    exporter = DcgmExporter("node-a", sampler.pci_bus_id)
    exporter.update(sampler.sample())
    clock.sleep(5)
    latest = sampler.sample()
    exporter.update(latest)
    exporter.update(sampler.readings(int(T0.timestamp() * 1000)))  # an older reading changes nothing
    families = _families(exporter)
    assert set(families) == {
        "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_TEMP",
    }  # fmt: skip
    gpu0 = latest.samples.filter(device_id="GPU-node-a-0")
    v = dict(zip(gpu0["metric"], gpu0["value"], strict=True))
    (labels, util), _ = families["DCGM_FI_DEV_GPU_UTIL"]
    assert labels == {
        "gpu": "0", "UUID": "GPU-node-a-0", "pci_bus_id": "00000000:18:00.0", "device": "nvidia0",
        "modelName": "NVIDIA H200", "Hostname": "node-a",
        "namespace": "team-a", "pod": "train-976368", "container": "main",
    }  # fmt: skip
    assert util == round(v["gpu_util"])
    assert families["DCGM_FI_PROF_SM_ACTIVE"][0][1] == v["sm_active"] / 100
    assert families["DCGM_FI_DEV_FB_USED"][0][1] == 10 * 1024  # MiB
    assert families["DCGM_FI_DEV_FB_FREE"][0][1] == (141 - 10) * 1024
    assert families["DCGM_FI_DEV_POWER_USAGE"][0][1] == v["power_w"]
    assert families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][0][1] == round(v["energy_j"] * 1000)  # mJ
    free_gpu = families["DCGM_FI_DEV_GPU_TEMP"][1][0]
    assert free_gpu["gpu"] == "1" and "pod" not in free_gpu  # nothing holds GPU 1: no pod labels


def test_mig_instance_carries_its_parent_and_profile() -> None:
    sampler = FakeSampler(FakeClock(T0), n=1)
    batch = sampler.sample()
    mig = DeviceInfo(
        "MIG-1", "onprem", parent_device_id="GPU-node-a-0", mig_profile="3g.71gb", gpu_fraction=3 / 7
    )
    samples = batch.samples.filter(metric="sm_active").with_columns(device_id=pl.lit("MIG-1"))
    exporter = DcgmExporter("node-a")
    exporter.update(SampleBatch(batch.samples, batch.devices, batch.workloads))
    exporter.update(SampleBatch(samples, [mig], batch.workloads))
    sm = _families(exporter)["DCGM_FI_PROF_SM_ACTIVE"]
    assert [(s["UUID"], s.get("GPU_I_PROFILE")) for s, _ in sm] == [
        ("GPU-node-a-0", None),
        ("GPU-node-a-0", "3g.71gb"),
    ]


def test_served_over_http() -> None:
    sampler = FakeSampler(FakeClock(T0), n=1)
    exporter = DcgmExporter("node-a")
    exporter.update(sampler.sample())
    server = exporter.serve("127.0.0.1", 0)
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        r = httpx.get(f"{base}/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert r.content == exporter.render()
        assert httpx.get(f"{base}/other").status_code == 404
    finally:
        server.shutdown()
        server.server_close()
