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
from pathlib import Path
from typing import Any

import boto3
import pytest
from prom.promserver import running_prometheus, series_text
from prom.sigv4gate import SigV4Gate
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


def _config(url: str, **extra: Any) -> CloudWatchPromQLConfig:
    values = {"name": "otel-ci", "region": "us-east-1", "url": url, "max_retries": 0} | extra
    return CloudWatchPromQLConfig(**values)


def _session(secret: str = SECRET) -> boto3.Session:
    return boto3.Session(aws_access_key_id=KEY, aws_secret_access_key=secret, region_name="us-east-1")


def test_signed_queries_give_pods_and_the_idle_gpu_exact_rows(tmp_path: Path, sqlite_url: str) -> None:
    with (
        running_prometheus(tmp_path, _openmetrics()) as prometheus,
        SigV4Gate(prometheus, KEY, SECRET).running() as gate,
    ):
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
    with (
        running_prometheus(tmp_path, _openmetrics()) as prometheus,
        SigV4Gate(prometheus, KEY, SECRET).running() as gate,
    ):
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
