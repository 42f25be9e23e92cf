"""``azure_monitor``: Container insights GPU rows joined to ``KubePodInventory``, through the real
``LogsQueryClient`` over HTTPS (trustme) to a fake Log Analytics that answers both queries from the
recorded-format fixtures in tests/fixtures/recorded/azure (provenance in its README).

Cluster ``aks-ml-westeu``, node ``aks-a100pool-27182818-vmss000000`` with ``nodeGpuCapacity`` 4,
2025-09-24 10:00–10:04, one collection a minute (each stands for 60 s), no per-GPU rows (modern AKS):

* pod 5f0c…/pytorch requests 2 GPUs (inventory: ``team-nlp/trainer-0``, StatefulSet ``trainer``);
* pod a7e2…/triton requests 1 (``team-vision/infer-6b7c9d8f5-qk2zt``, ReplicaSet);
* pod c3d4…/probe requests 1 at 10:00 and 10:01 only, and has no inventory row;
* pod e9f8…/llm requests 2 but is pending (``Computer`` empty): it holds no GPU.

Slots go to containers in ``containerName`` order: pytorch 0–1, triton 2, probe 3 (10:00–10:01).
So: slots 0–2 owned 300 s each, slot 3 owned by probe 120 s and unallocated 180 s; 4 × 300 =
1,200 present GPU-seconds, 1,020 allocated; nothing observed (no per-GPU rows).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from azurefake.server import Reply, Request, StaticCredential, fake_azure
from sqlalchemy import select

from connectors.azure_monitor import AzureMonitorConfig, AzureMonitorConnector
from connectors.base import RetriableError
from service.db import make_engine
from service.ledger.ingest import ingest_window
from service.models import Device, LedgerHour

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded" / "azure"
H10 = dt.datetime(2025, 9, 24, 10, tzinfo=dt.UTC)
H11 = H10 + dt.timedelta(hours=1)
NODE = "aks-a100pool-27182818-vmss000000"
P1, P2 = "5f0c2a9e-8d41-4b7a-9e3c-6a1d2f4b8c07", "a7e2b1c4-3d5f-4e6a-8b9c-0d1e2f3a4b5c"
P3, P4 = "c3d4e5f6-a7b8-4c9d-8e0f-1a2b3c4d5e6f", "e9f8d7c6-b5a4-4392-8170-6f5e4d3c2b1a"
TRAINER = "k8s:team-nlp/trainer-0/pytorch"
INFER = "k8s:team-vision/infer-6b7c9d8f5-qk2zt/triton"
PROBE = f"k8s:/{P3}/probe"
VMSS = (
    "/subscriptions/0d9c8b7a-6f5e-4d3c-2b1a-0f9e8d7c6b5a/resourcegroups/mc_rg-ml_aks-ml-westeu_westeurope"
    "/providers/microsoft.compute/virtualmachinescalesets/aks-a100pool-27182818-vmss"
)
NO_TABLE = {
    "error": {
        "message": "The request had some invalid properties",
        "code": "BadArgumentError",
        "innererror": {
            "code": "SemanticError",
            "message": "A semantic error occurred.",
            "innererror": {
                "code": "SEM0100",
                "message": "'where' operator: Failed to resolve table or column expression named "
                "'KubePodInventory'",
            },
        },
    }
}


def _body(name: str) -> dict:
    return json.loads((RECORDED / name).read_text())


def _ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _log_analytics(inventory: Callable[[Request], Reply] | None = None) -> Callable[[Request], Reply]:
    """InsightsMetrics rows inside the request's timespan; for a KubePodInventory query, the
    inventory rows of the UIDs the query lists (as the service would filter them)."""
    metrics = _body("log_analytics_insightsmetrics_gpu_requests.json")
    pods = _body("log_analytics_kubepodinventory_gpu_pods.json")

    def respond(request: Request) -> Reply:
        query = request.body["query"]
        if query.startswith("KubePodInventory"):
            if inventory is not None:
                return inventory(request)
            listed = set(re.findall(r'"([0-9a-f-]{36})"', query.split("PodUid in", 1)[1]))
            table = copy.deepcopy(pods["tables"][0])
            table["rows"] = [r for r in table["rows"] if r[0] in listed]
            return Reply(200, {"tables": [table]})
        first, last = (_ts(t) for t in request.body["timespan"].split("/"))
        table = copy.deepcopy(metrics["tables"][0])
        table["rows"] = [r for r in table["rows"] if first <= _ts(r[0]) < last]
        return Reply(200, {"tables": [table]})

    return respond


def _connector(url: str, ca: str, **extra: object) -> AzureMonitorConnector:
    config = AzureMonitorConfig(
        name="aks",
        workspace_id="7e6d5c4b-3a29-4180-9f8e-7d6c5b4a3928",
        region="westeurope",
        logs_endpoint=url,
        ca_file=ca,
        **extra,  # type: ignore[arg-type]
    )
    return AzureMonitorConnector(config, credential=StaticCredential("la-token"))


def _ledger(url: str) -> tuple[dict[tuple[str, str], dict], dict[str, dict]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(LedgerHour.__table__)).mappings().all()
            devices = conn.execute(select(Device.__table__)).mappings().all()
    finally:
        engine.dispose()
    return {(r["device_id"], r["workload_key"]): dict(r) for r in rows}, {
        d["device_id"]: dict(d) for d in devices
    }


def test_pods_get_namespace_and_name_and_free_gpus_stay_unallocated(tmp_path: Path, sqlite_url: str) -> None:
    with fake_azure(tmp_path, _log_analytics()) as fake, _connector(fake.url, fake.ca_path) as conn:
        batches = list(conn.collect(H10, H11))
        engine = make_engine(sqlite_url)
        try:
            result = ingest_window(engine, "aks", conn, H10, H11)
        finally:
            engine.dispose()
    assert result.samples_rejected == 0
    # collect(): one query for the rows, one for the inventory. ingest_window(): 09:00–12:00 in three
    # hourly queries, one inventory query for the hour with GPU rows. Each inventory query names the
    # three scheduled pods, not the pending one.
    inventory = [r.body for r in fake.requests if r.body["query"].startswith("KubePodInventory")]
    assert len(fake.requests) == 2 + 4 and len(inventory) == 2
    assert inventory[0]["timespan"] == "2025-09-24T09:45:00.000Z/2025-09-24T11:15:00.000Z"
    assert set(re.findall(r'"([0-9a-f-]{36})"', inventory[0]["query"])) == {P1, P2, P3}
    assert conn.pods_not_in_inventory == 2  # probe, once per read of the window

    workloads = {w.workload_key: w for b in batches for w in b.workloads}
    assert set(workloads) == {TRAINER, INFER, PROBE}
    assert (workloads[TRAINER].namespace, workloads[TRAINER].workload) == ("team-nlp", "trainer-0")
    assert (workloads[INFER].namespace, workloads[INFER].workload) == ("team-vision", "infer-6b7c9d8f5-qk2zt")
    assert (workloads[PROBE].namespace, workloads[PROBE].workload) == (None, P3)

    rows, devices = _ledger(sqlite_url)
    slot = [f"{NODE}/gpu{i}" for i in range(4)]
    expected = {
        (slot[0], TRAINER): (300.0, "team-nlp"),
        (slot[1], TRAINER): (300.0, "team-nlp"),
        (slot[2], INFER): (300.0, "team-vision"),
        (slot[3], PROBE): (120.0, None),
        (slot[3], ""): (180.0, None),
    }
    assert {k: (r["present_s"], r["namespace"]) for k, r in rows.items()} == expected
    assert all((r["observed_s"], r["busy_s"], r["idle_s"]) == (0.0, 0.0, 0.0) for r in rows.values())
    assert sum(r["present_s"] for r in rows.values()) == 1200.0
    assert sum(r["present_s"] for k, r in rows.items() if k[1]) == 1020.0
    # Four GPUs of one node; the pending pod's rows (Computer empty) made no device.
    assert set(devices) == set(slot)
    d = devices[slot[0]]
    assert (d["node"], d["cluster"], d["instance_id"], d["gpu_index"]) == (NODE, "aks-ml-westeu", VMSS, 0)


def test_workspace_without_kubepodinventory_keeps_uids(tmp_path: Path) -> None:
    respond = _log_analytics(lambda request: Reply(400, NO_TABLE))
    with fake_azure(tmp_path, respond) as fake, _connector(fake.url, fake.ca_path) as conn:
        batches = list(conn.collect(H10, H11))
    keys = {w.workload_key for b in batches for w in b.workloads}
    assert keys == {f"k8s:/{P1}/pytorch", f"k8s:/{P2}/triton", PROBE}
    assert conn.pods_not_in_inventory == 3
    assert len(fake.requests) == 2  # the rows, the refused inventory query (a 400 is not retried)


def test_pod_inventory_off_sends_no_second_query(tmp_path: Path) -> None:
    with (
        fake_azure(tmp_path, _log_analytics()) as fake,
        _connector(fake.url, fake.ca_path, pod_inventory=False) as conn,
    ):
        batches = list(conn.collect(H10, H11))
    assert len(fake.requests) == 1
    assert {w.workload_key for b in batches for w in b.workloads} == {
        f"k8s:/{P1}/pytorch",
        f"k8s:/{P2}/triton",
        PROBE,
    }
    assert conn.pods_not_in_inventory == 0  # not asked, not counted


def test_an_inventory_outage_fails_the_window(tmp_path: Path) -> None:
    """A window is never written with UID keys because the inventory was briefly unavailable."""
    busy = {"error": {"code": "ServiceUnavailable", "message": "try later"}}
    respond = _log_analytics(lambda request: Reply(503, busy))
    with (
        fake_azure(tmp_path, respond) as fake,
        _connector(fake.url, fake.ca_path, max_retries=1, backoff_s=0) as conn,
        pytest.raises(RetriableError, match="HTTP 503"),
    ):
        list(conn.collect(H10, H11))
    assert len(fake.requests) == 1 + 2
