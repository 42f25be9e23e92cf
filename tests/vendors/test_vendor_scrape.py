"""The recorded Intel and Ascend exporter pages, *scraped* by a real Prometheus (not backfilled): the
XPU Manager page exactly as the exporter serves it (no final newline, sorted lines, ``_created``),
the npu-exporter page with its own sample timestamps (set to the serving time, as the exporter
stamps its collection). Then the ``prometheus`` connector reads the scraped series back with each
vendor's profile and gets the page's readings (hand values: tests/fixtures/*/README.md).
"""

from __future__ import annotations

import datetime as dt
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import polars as pl
import pytest
from prom.promserver import binaries

from connectors.prometheus import PrometheusConfig, PrometheusConnector

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


class _Exporters(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        body = _pages().get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "text/plain")  # both exporters answer text/plain
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    prometheus, _ = binaries()
    work = tmp_path_factory.mktemp("scrape")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exporters)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{server.server_address[1]}"
    (work / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
        + "".join(
            f"  - job_name: {job}\n    metrics_path: {path}\n    static_configs: [{{targets: ['{target}']}}]\n"  # noqa: E501
            for job, path in (("xpum", "/xpum"), ("xpumd", "/xpumd"), ("npu-exporter", "/ascend"))
        )
    )
    port = _free_port()
    log = (work / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [prometheus, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        query = 'count by (job) ({__name__=~"xpum_power_watts|hw_power_watts|npu_chip_info_power"})'
        while True:  # until both pages were scraped at least twice
            assert proc.poll() is None, (work / "prometheus.log").read_text()[-2000:]
            try:
                answer = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=2).json()
                jobs = {r["metric"]["job"] for r in answer["data"]["result"]}
                up = httpx.get(f"{url}/api/v1/query", params={"query": "up"}, timeout=2).json()
                if jobs == {"xpum", "xpumd", "npu-exporter"} and all(
                    r["value"][1] == "1" for r in up["data"]["result"]
                ):
                    break
            except (httpx.TransportError, KeyError, ValueError):
                pass
            assert time.monotonic() < deadline, "no scrape of both pages in 60 s"
            time.sleep(0.5)
        time.sleep(1.5)
        yield url
    finally:
        server.shutdown()
        server.server_close()
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def _read(url: str, exporter: str, job: str) -> dict[tuple[str, str], set[tuple[float, str]]]:
    config = PrometheusConfig(
        name=job, url=url, step_s=1, exporter=exporter, label_selector=f'{{job="{job}"}}'
    )
    now = dt.datetime.now(dt.UTC)
    with PrometheusConnector(config) as connector:
        frame = pl.concat([b.samples for b in connector.collect(now - dt.timedelta(minutes=5), now)])
    frame = frame.with_columns(pl.col(pl.Categorical).cast(pl.String))
    out: dict[tuple[str, str], set[tuple[float, str]]] = {}
    for row in frame.iter_rows(named=True):
        out.setdefault((row["device_id"], row["metric"]), set()).add(
            (round(row["value"], 6), row["workload_key"])
        )
    return out


def test_prometheus_scrapes_the_xpu_manager_page_and_the_connector_reads_it(scraped: str) -> None:
    got = _read(scraped, "xpum", "xpum")
    train = "k8s:ml/train-xe-0/trainer"
    expected = (("gpu_util", 90.0), ("sm_active", 60.0), ("mem_bw", 35.0), ("power_w", 480.5),
                ("energy_j", 3_600_000.0), ("mem_used_b", 66_571_993_088.0), ("temp_c", 61.0))  # fmt: skip
    for metric, value in expected:
        assert got[(GPU_A, metric)] == {(value, train)}, metric
    assert len({device for device, _ in got}) == 2


def test_prometheus_scrapes_the_npu_exporter_page_and_the_connector_reads_it(scraped: str) -> None:
    got = _read(scraped, "ascend", "npu-exporter")
    pod = "k8s:llm/pretrain-0/worker"
    for metric, value in (("gpu_util", 92.0), ("sm_active", 87.0), ("tensor_active", 80.0), ("mem_bw", 44.0),
                          ("power_w", 352.6), ("temp_c", 57.0), ("mem_used_b", 52314.0 * MIB),
                          ("mem_total_b", 65536.0 * MIB)):  # fmt: skip
        assert got[(CHIP_0, metric)] == {(value, pod)}, metric
    assert len({device for device, _ in got}) == 2


def test_prometheus_scrapes_the_xpu_manager_2_page_and_the_connector_reads_it(scraped: str) -> None:
    got = _read(scraped, "xpumd", "xpumd")
    expected = (("gpu_util", 90.0), ("mem_bw", 35.0), ("power_w", 480.5), ("energy_j", 3_600_000.0),
                ("mem_used_b", 66_571_993_088.0), ("mem_total_b", 137_438_953_472.0),
                ("temp_c", 61.0))  # fmt: skip
    assert {metric: values for (_, metric), values in got.items()} == {m: {(v, "")} for m, v in expected}
