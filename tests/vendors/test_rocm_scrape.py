"""The recorded device-metrics-exporter page *scraped* by a real Prometheus (not backfilled), with
Prometheus' default ``honor_labels: false`` and the scrape target's own ``pod``/``namespace``/
``container`` labels (the exporter's pod, as a ServiceMonitor's service discovery attaches them):
GPU 0's ``pod="train-7"`` becomes ``exported_pod`` beside the target's ``pod``, and every series
carries the exporter's pod.
Then the ``prometheus`` connector with ``exporter = "amd"`` reads the page's readings back, the
exporter's pod owning nothing (hand values: tests/fixtures/amd/README.md)."""

from __future__ import annotations

import datetime as dt
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

PAGE = Path(__file__).resolve().parents[1] / "fixtures" / "amd" / "device-metrics-exporter.prom"
MIB = 1024 * 1024
G0, G1, G2 = "692251001124", "692251001125", "692251001126"


class _Exporter(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        body = PAGE.read_bytes() if self.path == "/metrics" else b""
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    prometheus, _ = binaries()
    work = tmp_path_factory.mktemp("amd-scrape")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{server.server_address[1]}"
    (work / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
        "  - job_name: amd-device-metrics-exporter\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
        "        labels: {pod: amdgpu-metrics-exporter-x7k2p, namespace: kube-amd-gpu,"
        " container: amdgpu-metrics-exporter-container}\n"
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
        while True:  # until the page was scraped at least twice
            assert proc.poll() is None, (work / "prometheus.log").read_text()[-2000:]
            try:
                answer = httpx.get(
                    f"{url}/api/v1/query",
                    params={"query": "count_over_time(gpu_gfx_activity[1m])"},
                    timeout=2,
                ).json()
                if (
                    answer["data"]["result"]
                    and min(int(r["value"][1]) for r in answer["data"]["result"]) >= 2
                ):
                    break
            except (httpx.TransportError, KeyError, ValueError):
                pass
            assert time.monotonic() < deadline, "no scrape of the page in 60 s"
            time.sleep(0.5)
        yield url
    finally:
        server.shutdown()
        server.server_close()
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_prometheus_scrapes_the_amd_page_and_the_connector_reads_it(scraped: str) -> None:
    config = PrometheusConfig(
        name="amd",
        url=scraped,
        step_s=1,
        exporter="amd",
        label_selector='{job="amd-device-metrics-exporter"}',
    )
    now = dt.datetime.now(dt.UTC)
    with PrometheusConnector(config) as connector:
        batches = list(connector.collect(now - dt.timedelta(minutes=5), now))
    frame = pl.concat([b.samples for b in batches]).with_columns(pl.col(pl.Categorical).cast(pl.String))
    got: dict[tuple[str, str], set[tuple[float, str]]] = {}
    for row in frame.iter_rows(named=True):
        got.setdefault((row["device_id"], row["metric"]), set()).add(
            (round(row["value"], 6), row["workload_key"])
        )
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
