"""``cloudwatch_promql`` (OTel Container Insights' dcgm-exporter series read with PromQL): the real
connector and httpx client against a real Prometheus 2.42 behind a local proxy that checks each
request's SigV4 signature the way AWS does (botocore recomputes it from the request as received,
with the secret the test knows) and refuses what does not match.

Series: dcgm-exporter labels as the agent's OTel pipeline leaves them (``dcgm.yaml`` of
amazon-cloudwatch-agent ab55b8d: ``gpu``, ``UUID``, ``device``, ``modelName``, the workload's
``pod``/``namespace``/``container``, ``Hostname`` dropped, ``node_name`` added), scraped every 30 s
(5 s into each half minute), 09:59–11:01 on 2026-03-02: node A GPU 0 ``ml/train-7c9d5b6f4-x2x9k``
at 90 % and tensor 0.45, 200 W; node B GPU 0 ``ml/train-7c9d5b6f4-9qvbn`` at 50 %, 0.2, 150 W;
node B GPU 1 idle (no pod labels), 58 W.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from prom.promserver import running_prometheus, series_text
from sqlalchemy import select

from connectors.cloudwatch_promql import CloudWatchPromQLConfig, CloudWatchPromQLConnector
from connectors.dcgm import FIELDS
from connectors.sdk import FatalSourceError
from service.db import make_engine
from service.ledger.ingest import ingest_window
from service.models import Device, LedgerHour

KEY, SECRET = "AKIDPROMQLTEST000001", "promql-secret-not-real"
START = dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)
H = dt.timedelta(hours=1)
NODE_A, NODE_B = "ip-10-0-1-11.ec2.internal", "ip-10-0-2-22.ec2.internal"
GPUS = {  # UUID: (node, gpu, pod or "", util %, tensor ratio, power W)
    "GPU-1f0c3a52-6d1e-4c4e-9d0b-0a1b2c3d4e50": (NODE_A, 0, "train-7c9d5b6f4-x2x9k", 90, 0.45, 200),
    "GPU-2a1d4b63-7e2f-4d5f-8e1c-1b2c3d4e5f60": (NODE_B, 0, "train-7c9d5b6f4-9qvbn", 50, 0.2, 150),
    "GPU-3b2e5c74-8f30-4e60-9f2d-2c3d4e5f6071": (NODE_B, 1, "", 0, 0.0, 58),
}


def _openmetrics() -> str:
    first = int((START - dt.timedelta(minutes=1)).timestamp()) + 5
    stamps = list(range(first, first + 62 * 60, 30))
    text = []
    for uuid, (node, gpu, pod, util, tensor, power) in GPUS.items():
        labels = {"gpu": str(gpu), "UUID": uuid, "device": f"nvidia{gpu}", "modelName": "NVIDIA A10G",
                  "node_name": node, "job": "dcgm-exporter"}  # fmt: skip
        if pod:
            labels |= {"pod": pod, "namespace": "ml", "container": "trainer"}
        for name, value in (("DCGM_FI_DEV_GPU_UTIL", util), ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", tensor),
                            ("DCGM_FI_DEV_POWER_USAGE", power)):  # fmt: skip
            text.append(series_text(name, labels, stamps, [float(value)] * len(stamps)))
    return "".join(text)


class _SigV4Gate:
    """Checks SigV4 on every GET as AWS would (service ``monitoring``, region ``us-east-1``) and
    proxies good requests to ``upstream``; counts ``signed`` and ``refused``."""

    def __init__(self, upstream: str) -> None:
        self.upstream, self.signed, self.refused = upstream.removeprefix("http://"), 0, 0
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if gate.valid(self.path, dict(self.headers.items())):
                    gate.signed += 1
                    conn = http.client.HTTPConnection(gate.upstream, timeout=10)
                    conn.request("GET", self.path)
                    answer = conn.getresponse()
                    status, body = answer.status, answer.read()
                    conn.close()
                else:
                    gate.refused += 1
                    status, body = (
                        403,
                        json.dumps(
                            {"message": "The request signature we calculated does not match"}
                        ).encode(),
                    )
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def valid(self, path: str, headers: dict[str, str]) -> bool:
        given, stamp, host = (
            headers.get("Authorization", ""),
            headers.get("X-Amz-Date", ""),
            headers.get("Host", ""),
        )
        scope = (
            f"Credential={KEY}/{stamp[:8]}/us-east-1/monitoring/aws4_request, SignedHeaders=host;x-amz-date, "
        )
        request = AWSRequest(
            method="GET", url=f"http://{host}{path}", headers={"host": host, "X-Amz-Date": stamp}
        )
        request.context["timestamp"] = stamp
        signer = SigV4Auth(Credentials(KEY, SECRET), "monitoring", "us-east-1")
        canonical = signer.canonical_request(request)
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        return given == f"AWS4-HMAC-SHA256 {scope}Signature={expected}"

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @contextmanager
    def running(self) -> Iterator[_SigV4Gate]:
        self._thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()


def _config(url: str, **extra: Any) -> CloudWatchPromQLConfig:
    values = {"name": "otel-ci", "region": "us-east-1", "url": url, "max_retries": 0} | extra
    return CloudWatchPromQLConfig(**values)


def _session(secret: str = SECRET) -> boto3.Session:
    return boto3.Session(aws_access_key_id=KEY, aws_secret_access_key=secret, region_name="us-east-1")


def test_signed_queries_give_pods_and_the_idle_gpu_exact_rows(tmp_path: Path, sqlite_url: str) -> None:
    with running_prometheus(tmp_path, _openmetrics()) as prometheus, _SigV4Gate(prometheus).running() as gate:
        engine = make_engine(sqlite_url)
        try:
            connector = CloudWatchPromQLConnector(
                _config(gate.url), session=_session(), clock=lambda: START + 2 * H
            )
            with connector:
                ingest_window(engine, "otel-ci", connector, START, START + H)
            with engine.connect() as conn:
                rows = {(r["device_id"], r["workload_key"]): dict(r)
                        for r in conn.execute(select(LedgerHour.__table__)).mappings()}  # fmt: skip
                devices = {r["device_id"]: dict(r) for r in conn.execute(select(Device.__table__)).mappings()}
        finally:
            engine.dispose()
        assert (gate.signed, gate.refused) == (len(FIELDS), 0)  # one query_range per field, each signed
    a, b0, b1 = GPUS
    assert sorted(rows) == sorted([
        (a, "k8s:ml/train-7c9d5b6f4-x2x9k/trainer"), (b0, "k8s:ml/train-7c9d5b6f4-9qvbn/trainer"), (b1, ""),
    ])  # fmt: skip
    for (uuid, _), row in rows.items():
        _, _, _, util, tensor, power = GPUS[uuid]
        assert (row["present_s"], row["observed_s"]) == (3600.0, 3600.0)
        assert row["busy_s_gpu_util"] == pytest.approx(util / 100 * 3600, abs=1e-6)
        assert row["busy_s_tensor_active"] == pytest.approx(tensor * 3600, abs=1e-6)
        assert row["energy_j"] == pytest.approx(power * 3600, abs=1e-6)
    assert rows[(b1, "")]["idle_s"] == 3600.0
    assert {d: (v["environment"], v["node"], v["gpu_index"]) for d, v in devices.items()} == {
        a: ("aws", NODE_A, 0),
        b0: ("aws", NODE_B, 0),
        b1: ("aws", NODE_B, 1),
    }


def test_a_wrong_secret_is_refused_and_fatal(tmp_path: Path) -> None:
    with running_prometheus(tmp_path, _openmetrics()) as prometheus, _SigV4Gate(prometheus).running() as gate:
        connector = CloudWatchPromQLConnector(_config(gate.url), session=_session("not-the-secret"))
        with connector, pytest.raises(FatalSourceError, match="HTTP 403"):
            list(connector.collect(START, START + H))
        assert (gate.signed, gate.refused) == (0, 1)


def test_config_defaults_and_refusals() -> None:
    config = CloudWatchPromQLConfig(name="ci", region="eu-west-1")
    assert config.url == "https://monitoring.eu-west-1.amazonaws.com"
    assert (config.step_s, config.environment, config.signing_service) == (30.0, "aws", "monitoring")
    assert config.node_labels[0] == "node_name"
    with pytest.raises(ValueError, match="region is required"):
        CloudWatchPromQLConfig(
            name="ci", url="https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1"
        )
    with pytest.raises(ValueError, match="SigV4"):
        CloudWatchPromQLConfig(name="ci", region="us-east-1", bearer_token="t")
