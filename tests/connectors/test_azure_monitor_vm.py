"""``azure_monitor`` (VM path): the real ``MetricsClient`` against an HTTPS fake ``metrics:getBatch``.

VM ``ndh100-train-01`` (2 GPUs shown by the guest collector's ``gpu`` dimension), 1-minute grains
stamped at their start, 2025-09-20 10:00–10:03:

* GPU 0: utilization 50, 100, 20 % → observed 180 s, busy (50 + 100 + 20) × 0.6 = 102 s, idle 0;
  memory used 1000, 2000, 3000 MiB → max 3,145,728,000 B.
* GPU 1: utilization 0, 2 % and no value at 10:02 → observed 120 s, busy 2 × 0.6 = 1.2 s, idle 120 s
  (both under 5 %); memory 10 MiB every minute keeps it present all 180 s.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from azurefake.server import Reply, Request, StaticCredential, fake_azure
from sqlalchemy import select

from connectors.azure_monitor import AzureMonitorConfig, AzureMonitorConnector
from connectors.base import FatalSourceError
from service.db import make_engine
from service.ledger.ingest import ingest_window
from service.models import Device, LedgerHour

H10 = dt.datetime(2025, 9, 20, 10, tzinfo=dt.UTC)
SUB = "7a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
VM = f"/subscriptions/{SUB}/resourceGroups/RG-GPU/providers/Microsoft.Compute/virtualMachines/ndh100-train-01"
NAMESPACE = "azure.vm.linux.guestmetrics/nvidia"
MIB = 1024 * 1024


def _series(gpu: str, values: list[float | None]) -> dict:
    return {
        "metadatavalues": [{"name": {"value": "gpu", "localizedValue": "gpu"}, "value": gpu}],
        "data": [
            {"timeStamp": f"2025-09-20T10:0{i}:00Z", **({} if v is None else {"average": v})}
            for i, v in enumerate(values)
        ],
    }


def _metric(name: str, unit: str, series: list[dict]) -> dict:
    return {
        "id": f"{VM}/providers/Microsoft.Insights/metrics/{name}",
        "type": "Microsoft.Insights/metrics",
        "name": {"value": name, "localizedValue": name},
        "displayDescription": "",
        "unit": unit,
        "timeseries": series,
        "errorCode": "Success",
    }


BODY = {
    "values": [
        {
            "starttime": "2025-09-20T09:00:00Z",
            "endtime": "2025-09-20T12:00:00Z",
            "interval": "PT1M",
            "namespace": NAMESPACE,
            "resourceregion": "eastus",
            "resourceid": VM,
            "value": [
                _metric(
                    "GPU Utilization", "Percent", [_series("0", [50, 100, 20]), _series("1", [0, 2, None])]
                ),
                _metric(
                    "GPU Memory Used", "Count", [_series("0", [1000, 2000, 3000]), _series("1", [10, 10, 10])]
                ),
            ],
        }
    ]
}


def _connector(url: str, ca: str) -> AzureMonitorConnector:
    config = AzureMonitorConfig(
        name="vms",
        region="eastus",
        metrics_endpoint=url,
        ca_file=ca,
        max_retries=0,
        vm_resource_ids=(VM,),
        vm_metric_namespace=NAMESPACE,
        vm_metrics={
            "GPU Utilization": {"metric": "gpu_util"},
            "GPU Memory Used": {"metric": "mem_used_b", "scale": MIB},
        },
        vm_gpu_dimension="gpu",
    )
    return AzureMonitorConnector(config, credential=StaticCredential("metrics-token"))


def test_get_batch_request_and_exact_ledger(tmp_path: Path, sqlite_url: str) -> None:
    def respond(request: Request) -> Reply:
        return Reply(200, BODY)

    with fake_azure(tmp_path, respond) as fake, _connector(fake.url, fake.ca_path) as conn:
        engine = make_engine(sqlite_url)
        try:
            ingest_window(engine, "vms", conn, H10, H10 + dt.timedelta(hours=1))
            with engine.connect() as db:
                rows = {r["device_id"]: r for r in db.execute(select(LedgerHour.__table__)).mappings()}
                devices = {d.device_id: d for d in db.execute(select(Device.__table__)).all()}
        finally:
            engine.dispose()

    (request,) = fake.requests
    assert (request.method, request.path) == ("POST", f"/subscriptions/{SUB}/metrics:getBatch")
    assert request.body == {"resourceids": [VM]}
    assert request.headers["authorization"] == "Bearer metrics-token"
    query = {k: v[0] for k, v in request.query.items()}
    assert query == {
        "api-version": "2024-02-01",
        "starttime": "2025-09-20T09:00:00.000Z",
        "endtime": "2025-09-20T12:00:00.000Z",
        "interval": "PT1M",
        "metricnamespace": NAMESPACE,
        "metricnames": "GPU Utilization,GPU Memory Used",
        "aggregation": "Average",
        "filter": "gpu eq '*'",
    }

    gpu0, gpu1 = rows["ndh100-train-01/gpu0"], rows["ndh100-train-01/gpu1"]
    assert (gpu0["present_s"], gpu0["observed_s"], gpu0["busy_s"], gpu0["idle_s"]) == (
        180.0,
        180.0,
        102.0,
        0.0,
    )
    assert gpu0["mem_used_max_b"] == 3000.0 * MIB == 3_145_728_000.0
    assert gpu0["workload_key"] == ""
    assert (gpu1["present_s"], gpu1["observed_s"], gpu1["idle_s"]) == (180.0, 120.0, 120.0)
    assert gpu1["busy_s"] == pytest.approx(1.2, abs=1e-6)
    assert gpu1["mem_used_max_b"] == 10.0 * MIB
    device = devices["ndh100-train-01/gpu1"]
    assert (device.instance_id, device.account, device.region, device.node) == (
        VM.lower(),
        SUB,
        "eastus",
        "ndh100-train-01",
    )
    assert device.gpu_index == 1 and device.environment == "azure"


def test_forbidden_names_the_role(tmp_path: Path) -> None:
    error = {"error": {"code": "AuthorizationFailed", "message": "no access"}}
    with (
        fake_azure(tmp_path, lambda r: Reply(403, error)) as fake,
        _connector(fake.url, fake.ca_path) as conn,
        pytest.raises(FatalSourceError, match="HTTP 403.*Monitoring Reader"),
    ):
        list(conn.collect(H10, H10 + dt.timedelta(hours=1)))
