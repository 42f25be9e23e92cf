"""The recorded Intel and Ascend exporter pages, *scraped* by a real Prometheus (not backfilled): the
XPU Manager page exactly as the exporter serves it (no final newline, sorted lines, ``_created``),
the npu-exporter page with its own sample timestamps (set to the serving time, as the exporter
stamps its collection). Then the ``prometheus`` connector reads the scraped series back with each
vendor's profile and gets the page's readings (hand values: tests/fixtures/*/README.md).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from scrape_pages import read_back, scraping_prometheus

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MIB = 1024 * 1024
GPU_A = "00000000-0000-0029-0000-002f0bd58086"
CHIP_0 = "7C0D3A04-2C204A14-B5100C80-50C61CD1-32C70000"


def _pages() -> dict[str, bytes]:
    xpum = (FIXTURES / "xpum/max1550-node.prom").read_bytes()
    ascend = (FIXTURES / "ascend/910b3-node.prom").read_text()
    now_ms = str(int(time.time() * 1000))
    xpumd = (FIXTURES / "xpum/xpumd-node.prom").read_bytes()
    return {
        "/xpum": xpum,
        "/xpumd": xpumd,
        "/ascend": re.sub(r" \d{13}$", " " + now_ms, ascend, flags=re.M).encode(),
    }


def _scrape_configs(target: str) -> str:
    return "".join(
        f"  - job_name: {job}\n    metrics_path: {path}\n    static_configs: [{{targets: ['{target}']}}]\n"
        for job, path in (("xpum", "/xpum"), ("xpumd", "/xpumd"), ("npu-exporter", "/ascend"))
    )


def _all_scraped(url: str) -> bool:
    query = 'count by (job) ({__name__=~"xpum_power_watts|hw_power_watts|npu_chip_info_power"})'
    answer = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=2).json()
    jobs = {r["metric"]["job"] for r in answer["data"]["result"]}
    up = httpx.get(f"{url}/api/v1/query", params={"query": "up"}, timeout=2).json()
    return jobs == {"xpum", "xpumd", "npu-exporter"} and all(
        r["value"][1] == "1" for r in up["data"]["result"]
    )


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with scraping_prometheus(
        tmp_path_factory.mktemp("scrape"),
        lambda path: _pages().get(path),
        "text/plain",  # both exporters answer text/plain
        _scrape_configs,
        _all_scraped,  # until every page was scraped
        settle_s=1.5,
    ) as url:
        yield url


def test_prometheus_scrapes_the_xpu_manager_page_and_the_connector_reads_it(scraped: str) -> None:
    got, _ = read_back(scraped, "xpum", "xpum")
    train = "k8s:ml/train-xe-0/trainer"
    expected = (("gpu_util", 90.0), ("sm_active", 60.0), ("mem_bw", 35.0), ("power_w", 480.5),
                ("energy_j", 3_600_000.0), ("mem_used_b", 66_571_993_088.0), ("temp_c", 61.0))  # fmt: skip
    for metric, value in expected:
        assert got[(GPU_A, metric)] == {(value, train)}, metric
    assert len({device for device, _ in got}) == 2


def test_prometheus_scrapes_the_npu_exporter_page_and_the_connector_reads_it(scraped: str) -> None:
    got, _ = read_back(scraped, "ascend", "npu-exporter")
    pod = "k8s:llm/pretrain-0/worker"
    for metric, value in (("gpu_util", 92.0), ("sm_active", 87.0), ("tensor_active", 80.0), ("mem_bw", 44.0),
                          ("power_w", 352.6), ("temp_c", 57.0), ("mem_used_b", 52314.0 * MIB),
                          ("mem_total_b", 65536.0 * MIB)):  # fmt: skip
        assert got[(CHIP_0, metric)] == {(value, pod)}, metric
    assert len({device for device, _ in got}) == 2


def test_prometheus_scrapes_the_xpu_manager_2_page_and_the_connector_reads_it(scraped: str) -> None:
    got, _ = read_back(scraped, "xpumd", "xpumd")
    expected = (("gpu_util", 90.0), ("mem_bw", 35.0), ("power_w", 480.5), ("energy_j", 3_600_000.0),
                ("mem_used_b", 66_571_993_088.0), ("mem_total_b", 137_438_953_472.0),
                ("temp_c", 61.0))  # fmt: skip
    assert {metric: values for (_, metric), values in got.items()} == {m: {(v, "")} for m, v in expected}
