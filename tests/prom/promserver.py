"""A real Prometheus for tests: backfill generated OpenMetrics with promtool, serve it on 127.0.0.1.

docs/testing.md's recipe: timestamps in seconds, every series sorted, a final ``# EOF``,
``--max-block-duration=24h``; Prometheus started as its own process (we stop that PID) with no
scrape targets, 100 years of retention (counted from the newest block), ready when ``/-/ready``
answers. Skipped when the binaries are missing, unless ``GPU_LEDGER_REQUIRE_PROMETHEUS`` is set.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

REQUIRE = os.environ.get("GPU_LEDGER_REQUIRE_PROMETHEUS", "") not in ("", "0", "false")


def binaries() -> tuple[str, str]:
    """Paths of ``prometheus`` and ``promtool``; skip (or fail, in CI) when either is missing."""
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prometheus is None or promtool is None:
        reason = "prometheus/promtool not installed (apt-get install prometheus)"
        if REQUIRE:
            pytest.fail(f"GPU_LEDGER_REQUIRE_PROMETHEUS is set but {reason}", pytrace=False)
        pytest.skip(reason)
    return prometheus, promtool


def series_text(name: str, labels: Mapping[str, str], ts_s: Sequence[int], values: Sequence[float]) -> str:
    """One series in OpenMetrics text, timestamps in seconds (ts_s must be sorted)."""
    label_text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    head = f"{name}{{{label_text}}}"
    return "".join(f"{head} {v:.17g} {t}\n" for t, v in zip(ts_s, values, strict=True))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_prometheus(workdir: Path, openmetrics: str, flags: Sequence[str] = ()) -> Iterator[str]:
    """Backfill ``openmetrics`` (``# EOF`` is added) and serve it with extra ``flags``
    (``--query.max-samples=…``); yields the base URL."""
    prometheus, promtool = binaries()
    data, source = workdir / "data", workdir / "backfill.om"
    source.write_text(openmetrics + "# EOF\n")
    subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--max-block-duration=24h",
            str(source),
            str(data),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    port = _free_port()
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{port}",
            *flags,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(workdir / 'prometheus.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("prometheus not ready after 30 s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
