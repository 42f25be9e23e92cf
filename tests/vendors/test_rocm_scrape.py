"""The recorded device-metrics-exporter page *scraped* by a real Prometheus (not backfilled), with
Prometheus' default ``honor_labels: false`` and the scrape target's own ``pod``/``namespace``/
``container`` labels (the exporter's pod, as a ServiceMonitor's service discovery attaches them):
GPU 0's ``pod="train-7"`` becomes ``exported_pod`` beside the target's ``pod``, and every series
carries the exporter's pod.
Then the ``prometheus`` connector with ``exporter = "amd"`` reads the page's readings back, the
exporter's pod owning nothing (hand values: tests/fixtures/amd/README.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from scrape_pages import read_back, scraping_prometheus

PAGE = Path(__file__).resolve().parents[1] / "fixtures" / "amd" / "device-metrics-exporter.prom"
MIB = 1024 * 1024
G0, G1, G2 = "692251001124", "692251001125", "692251001126"


def _scraped_twice(url: str) -> bool:
    query = "count_over_time(gpu_gfx_activity[1m])"
    answer = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=2).json()
    return bool(answer["data"]["result"]) and min(int(r["value"][1]) for r in answer["data"]["result"]) >= 2


def _scrape_configs(target: str) -> str:
    """The target with the exporter's pod labels, as a ServiceMonitor's discovery attaches them."""
    return (
        "  - job_name: amd-device-metrics-exporter\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
        "        labels: {pod: amdgpu-metrics-exporter-x7k2p, namespace: kube-amd-gpu,"
        " container: amdgpu-metrics-exporter-container}\n"
    )


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with scraping_prometheus(
        tmp_path_factory.mktemp("amd-scrape"),
        lambda path: PAGE.read_bytes() if path == "/metrics" else None,
        "text/plain; version=0.0.4; charset=utf-8",
        _scrape_configs,
        _scraped_twice,  # until the page was scraped at least twice
    ) as url:
        yield url


def test_prometheus_scrapes_the_amd_page_and_the_connector_reads_it(scraped: str) -> None:
    got, batches = read_back(scraped, "amd", "amd-device-metrics-exporter")
    train, job = "k8s:llm/train-7/trainer", "slurm:4242"
    stored = httpx.get(f"{scraped}/api/v1/query", params={"query": "gpu_gfx_activity"}, timeout=5).json()
    pods = {
        r["metric"]["serial_number"]: (r["metric"].get("pod"), r["metric"].get("exported_pod"))
        for r in stored["data"]["result"]
    }
    exporter_pod = "amdgpu-metrics-exporter-x7k2p"
    # honor_labels false: the exporter's own pod label is renamed where it wrote one, the target's stays
    assert pods == {G0: (exporter_pod, "train-7"), G1: (exporter_pod, None), G2: (exporter_pod, None)}
    expected = {
        G0: (train, {"gpu_util": 87.0, "mem_bw": 41.0, "power_w": 612.0, "energy_j": 1_234_567.890123,
                     "mem_used_b": 150000.0 * MIB, "mem_total_b": 196592.0 * MIB, "temp_c": 71.0,
                     "sm_active": 72.0, "tensor_active": 45.0}),
        G1: ("", {"gpu_util": 0.0, "power_w": 130.0, "energy_j": 987_654.321, "temp_c": 40.0}),
        G2: (job, {"gpu_util": 52.0, "power_w": 450.0, "energy_j": 550_000.0, "sm_active": 24.0,
                   "tensor_active": 15.0}),
    }  # fmt: skip
    for device, (work, values) in expected.items():
        for metric, value in values.items():
            assert got[(device, metric)] == {(value, work)}, (device, metric)
    assert {d for d, _ in got} == {G0, G1, G2}
    devices = {d.device_id: d for b in batches for d in b.devices}
    assert {(d.vendor, d.gpu_model) for d in devices.values()} == {("amd", "AMD Instinct MI300X")}
