"""Recorded exporter pages served over HTTP and *scraped* by a real Prometheus (not backfilled),
then read back through the ``prometheus`` connector: what the vendor scrape tests share."""

from __future__ import annotations

import datetime as dt
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import polars as pl
from prom.promserver import _free_port, binaries

from connectors.prometheus import PrometheusConfig, PrometheusConnector
from connectors.sdk import SampleBatch

#: (device_id, metric) → {(value rounded to 6 places, workload_key)}
Readings = dict[tuple[str, str], set[tuple[float, str]]]


@contextmanager
def scraping_prometheus(
    workdir: Path,
    page: Callable[[str], bytes | None],
    content_type: str,
    scrape_configs: Callable[[str], str],
    ready: Callable[[str], bool],
    *,
    settle_s: float = 0.0,
) -> Iterator[str]:
    """Serve ``page(path)`` (None: 404) as ``content_type``; run Prometheus scraping every second
    with ``scrape_configs(target)`` (``host:port`` of the pages); yield its URL once ``ready(url)``
    (errors of a Prometheus not up yet count as not ready; 60 s at most) and ``settle_s`` more."""
    prometheus, _ = binaries()

    class Pages(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802  (http.server's name)
            body = page(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", content_type)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{server.server_address[1]}"
    (workdir / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n" + scrape_configs(target)
    )
    port = _free_port()
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [prometheus, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (workdir / "prometheus.log").read_text()[-2000:]
            try:
                if ready(url):
                    break
            except (httpx.TransportError, KeyError, ValueError):
                pass
            assert time.monotonic() < deadline, "the pages were not scraped as awaited in 60 s"
            time.sleep(0.5)
        time.sleep(settle_s)
        yield url
    finally:
        server.shutdown()
        server.server_close()
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def read_back(url: str, exporter: str, job: str) -> tuple[Readings, list[SampleBatch]]:
    """The last five minutes of ``job``'s series through the ``prometheus`` connector with the
    ``exporter`` profile: the readings, and the batches (for their devices)."""
    config = PrometheusConfig(
        name=job, url=url, step_s=1, exporter=exporter, label_selector=f'{{job="{job}"}}'
    )
    now = dt.datetime.now(dt.UTC)
    with PrometheusConnector(config) as connector:
        batches = list(connector.collect(now - dt.timedelta(minutes=5), now))
    frame = pl.concat([b.samples for b in batches]).with_columns(pl.col(pl.Categorical).cast(pl.String))
    out: Readings = {}
    for row in frame.iter_rows(named=True):
        out.setdefault((row["device_id"], row["metric"]), set()).add(
            (round(row["value"], 6), row["workload_key"])
        )
    return out, batches
