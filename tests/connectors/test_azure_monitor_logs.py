"""``azure_monitor`` (AKS path): the real ``LogsQueryClient`` against an HTTPS fake Log Analytics API.

The fixture (tests/fixtures/azure/log_analytics_query_insightsmetrics_gpu.json, described in the
shared fixtures README) is cluster ``aks-gpu-prod``, 2025-09-20 10:00–10:05, 1-minute rows, two
ND H100 v5 nodes with ``nodeGpuCapacity`` = 8 each:

* node ``…vmss000000``: pod 3b640407…/trainer requests 4 GPUs, pod eb341cd2…/vllm 2; 2 GPUs free;
* node ``…vmss000001``: pod 56b227a7…/trainer requests all 8.

Containers take slots in ``containerName`` order, their GPUs in ``gpuId`` order. So, on node 0,
trainer's GPUs 15c51c87, 83e03cbc, b3842287, b93ffd33 are slots 0–3, vllm's a221253e, ba26645c
slots 4–5, slots 6–7 are free; node 1's GPUs in sorted-id order are slots 0–7.

Every row stands for 60 s; 5 collections → 300 s per slot. Allocated: (4 + 2 + 8) × 300 = 4,200 s =
1.1667 GPU-h; present: 16 × 300 = 4,800 s = 1.3333 GPU-h. Busy seconds = Σ duty % × 60 s / 100.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from azurefake.server import Reply, Request, StaticCredential, fake_azure
from sqlalchemy import select

from connectors.azure_monitor import AzureMonitorConfig, AzureMonitorConnector
from connectors.azure_pod_inventory import COLUMNS as INVENTORY_COLUMNS
from connectors.base import FatalSourceError, RetriableError
from service.db import make_engine
from service.ledger.ingest import ingest_window
from service.models import ConnectorState, Device, LedgerHour

FIXTURE = Path(__file__).parent.parent / "fixtures" / "azure" / "log_analytics_query_insightsmetrics_gpu.json"
H10 = dt.datetime(2025, 9, 20, 10, tzinfo=dt.UTC)
H11 = H10 + dt.timedelta(hours=1)
N0, N1 = "aks-ndh100-38117625-vmss000000", "aks-ndh100-38117625-vmss000001"
TRAIN0 = "k8s:/3b640407-06be-55f0-dce1-32b2cf0d4aae/trainer"
VLLM = "k8s:/eb341cd2-df78-d1e0-4794-7e13a7b9fddc/vllm"
TRAIN1 = "k8s:/56b227a7-7bc4-a5ca-d820-75d9991dc20d/trainer"
SUB = "6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f"
VMSS = (
    f"/subscriptions/{SUB}/resourcegroups/mc_rg-aks-gpu_aks-gpu-prod_eastus"
    "/providers/microsoft.compute/virtualmachinescalesets/aks-ndh100-38117625-vmss"
)
GPU_MEM = 85520809984.0
# (device, workload) → (Σ duty cycle % over the 5 minutes, max memory used in bytes)
PER_GPU = {
    (f"{N0}/gpu0", TRAIN0): (70 + 87 + 75 + 60 + 55, 66571993088.0),  # GPU-15c51c87
    (f"{N0}/gpu1", TRAIN0): (81 + 99 + 51 + 97 + 65, 81604378624.0),  # GPU-83e03cbc
    (f"{N0}/gpu2", TRAIN0): (88 + 87 + 70 + 52 + 45, 68719476736.0),  # GPU-b3842287
    (f"{N0}/gpu3", TRAIN0): (57 + 53 + 74 + 85 + 68, 80530636800.0),  # GPU-b93ffd33
    (f"{N0}/gpu4", VLLM): (38 + 78 + 77 + 54 + 41, 81604378624.0),  # GPU-a221253e
    (f"{N0}/gpu5", VLLM): (84 + 90 + 69 + 49 + 97, 71940702208.0),  # GPU-ba26645c
    (f"{N1}/gpu0", TRAIN1): (67 + 41 + 36 + 41 + 85, 68719476736.0),  # GPU-06e55fe6
    (f"{N1}/gpu1", TRAIN1): (43 + 69 + 97 + 44 + 81, 73014444032.0),  # GPU-08242c67
    (f"{N1}/gpu2", TRAIN1): (60 + 65 + 41 + 46 + 93, 81604378624.0),  # GPU-2f6429e9
    (f"{N1}/gpu3", TRAIN1): (86 + 82 + 94 + 75 + 87, 71940702208.0),  # GPU-605a6201
    (f"{N1}/gpu4", TRAIN1): (50 + 81 + 68 + 86 + 75, 80530636800.0),  # GPU-78f43691
    (f"{N1}/gpu5", TRAIN1): (75 + 41 + 79 + 74 + 63, 75161927680.0),  # GPU-80a58cd0
    (f"{N1}/gpu6", TRAIN1): (61 + 62 + 60 + 74 + 64, 64424509440.0),  # GPU-cd279c67
    (f"{N1}/gpu7", TRAIN1): (42 + 35 + 95 + 55 + 91, 75161927680.0),  # GPU-da71360a
}
FREE = [(f"{N0}/gpu6", ""), (f"{N0}/gpu7", "")]


def _fixture() -> dict:
    return json.loads(FIXTURE.read_text())


EMPTY_INVENTORY = {
    "tables": [
        {
            "name": "PrimaryResult",
            "columns": [{"name": c, "type": "string"} for c in INVENTORY_COLUMNS],
            "rows": [],
        }
    ]
}


def _log_analytics(body: dict) -> Callable[[Request], Reply]:
    """Answers every InsightsMetrics query with ``body``'s rows inside the request's ``timespan`` (as
    the service does), a KubePodInventory query with no rows (these pods keep their UIDs)."""

    def respond(request: Request) -> Reply:
        if request.body["query"].startswith("KubePodInventory"):
            return Reply(200, EMPTY_INVENTORY)
        first, last = request.body["timespan"].split("/")
        table = copy.deepcopy(body["tables"][0])
        table["rows"] = [r for r in table["rows"] if _ts(first) <= _ts(r[0]) < _ts(last)]
        return Reply(200, {**body, "tables": [table]})

    return respond


def _ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _connector(url: str, ca: str, **extra: object) -> AzureMonitorConnector:
    config = AzureMonitorConfig(
        name="aks",
        workspace_id="0b8f5e2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b",
        region="eastus",
        logs_endpoint=url,
        ca_file=ca,
        **extra,  # type: ignore[arg-type]
    )
    return AzureMonitorConnector(config, credential=StaticCredential("la-token"))


def _ledger(url: str) -> dict[tuple[str, str], LedgerHour]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(LedgerHour.__table__)).mappings().all()
    finally:
        engine.dispose()
    return {(r["device_id"], r["workload_key"]): r for r in rows}


def test_fixture_gives_exact_present_allocated_and_busy_seconds(tmp_path: Path, sqlite_url: str) -> None:
    with fake_azure(tmp_path, _log_analytics(_fixture())) as fake, _connector(fake.url, fake.ca_path) as conn:
        engine = make_engine(sqlite_url)
        try:
            result = ingest_window(engine, "aks", conn, H10, H11)
            with engine.connect() as db:
                devices = {d.device_id: d for d in db.execute(select(Device.__table__)).all()}
        finally:
            engine.dispose()

    # The ingestor reads one presence gap (1 h) either side: 09:00–12:00 in three 1-hour queries,
    # plus one KubePodInventory query (15 min either side) for the one hour that has GPU pods.
    spans = [r.body["timespan"] for r in fake.requests]
    assert spans == [
        "2025-09-20T09:00:00.000Z/2025-09-20T10:00:00.000Z",
        "2025-09-20T10:00:00.000Z/2025-09-20T11:00:00.000Z",
        "2025-09-20T09:45:00.000Z/2025-09-20T11:15:00.000Z",
        "2025-09-20T11:00:00.000Z/2025-09-20T12:00:00.000Z",
    ]
    assert fake.requests[2].body["query"].startswith("KubePodInventory")
    assert conn.pods_not_in_inventory == 3  # the inventory answered no rows: the three keep UIDs
    assert all(r.path == "/v1/workspaces/0b8f5e2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b/query" for r in fake.requests)
    assert all(r.headers["authorization"] == "Bearer la-token" for r in fake.requests)
    assert 'Namespace == "container.azm.ms/gpu"' in fake.requests[0].body["query"]

    assert result.devices == 16
    assert result.samples_rejected == 0
    # 14 allocated slots × 5 × (duty, used, total) + 2 free slots × 5 presence readings.
    assert result.samples_read == 14 * 5 * 3 + 2 * 5
    assert set(devices) == {f"{n}/gpu{i}" for n in (N0, N1) for i in range(8)}
    gpu5 = devices[f"{N0}/gpu5"]
    assert (gpu5.environment, gpu5.provider, gpu5.account, gpu5.region) == ("azure", "azure", SUB, "eastus")
    assert (gpu5.cluster, gpu5.node, gpu5.instance_id) == ("aks-gpu-prod", N0, VMSS)
    assert gpu5.gpu_model == "NVIDIA H100 80GB HBM3"
    assert devices[f"{N0}/gpu7"].gpu_model == "NVIDIA H100 80GB HBM3"  # a node's model, even unallocated

    rows = _ledger(sqlite_url)
    assert set(rows) == set(PER_GPU) | set(FREE)
    for key, (duty_sum, mem_max) in PER_GPU.items():
        row = rows[key]
        assert row["hour_start"].hour == 10
        assert (row["present_s"], row["observed_s"], row["idle_s"]) == (300.0, 300.0, 0.0), key
        assert row["busy_s"] == pytest.approx(duty_sum * 0.6, abs=1e-6), key
        assert row["default_metric"] == "gpu_util"
        assert (row["mem_used_max_b"], row["mem_total_b"]) == (mem_max, GPU_MEM), key
        assert row["energy_j"] is None and row["power_avg_w"] is None
    for key in FREE:  # present, unobserved: neither busy nor idle
        row = rows[key]
        assert (row["present_s"], row["observed_s"], row["busy_s"], row["idle_s"]) == (300.0, 0.0, 0.0, 0.0)
        assert (row["mem_used_max_b"], row["mem_total_b"]) == (None, None)

    present = sum(r["present_s"] for r in rows.values())
    allocated = sum(r["present_s"] for k, r in rows.items() if k[1])
    assert (present, allocated) == (4800.0, 4200.0)  # 1.3333 and 1.1667 GPU-h
    assert round(present / 3600, 4) == 1.3333 and round(allocated / 3600, 4) == 1.1667
    by_workload: dict[str, float] = {}
    for (_, workload), row in rows.items():
        by_workload[workload] = by_workload.get(workload, 0.0) + row["present_s"]
    assert by_workload == {TRAIN0: 1200.0, VLLM: 600.0, TRAIN1: 2400.0, "": 600.0}
    busy = sum(r["busy_s"] for r in rows.values())
    assert busy == pytest.approx(0.6 * sum(d for d, _ in PER_GPU.values()), abs=1e-5)
    assert busy == pytest.approx(0.6 * 4760, abs=1e-5)  # Σ of the 70 duty-cycle readings: 2,096 + 2,664 %


def test_without_per_gpu_rows_capacity_still_makes_present_gpus(tmp_path: Path, sqlite_url: str) -> None:
    """Modern clusters: only capacity/allocatable/requests/limits rows; the agent also sends
    ``k8sNamespace`` and ``controllerName`` here. Same present and allocated seconds, nothing observed."""
    body = _fixture()
    table = body["tables"][0]
    rows = []
    for row in table["rows"]:
        tags = json.loads(row[6])
        if "gpuId" in tags:
            continue
        if row[4] == "containerGpuRequests" and tags["containerName"].endswith("/vllm"):
            tags.update(k8sNamespace="inference", controllerName="chat-serving")
        rows.append([*row[:6], json.dumps(tags), row[7]])
    table["rows"] = rows
    with fake_azure(tmp_path, _log_analytics(body)) as fake, _connector(fake.url, fake.ca_path) as conn:
        batches = list(conn.collect(H10, H11))
        engine = make_engine(sqlite_url)
        try:
            ingest_window(engine, "aks", conn, H10, H11)
        finally:
            engine.dispose()
    vllm = "k8s:inference/eb341cd2-df78-d1e0-4794-7e13a7b9fddc/vllm"
    workloads = {w.workload_key: w for b in batches for w in b.workloads}
    assert (workloads[vllm].namespace, workloads[vllm].workload) == ("inference", "chat-serving")
    assert workloads[TRAIN0].workload == "3b640407-06be-55f0-dce1-32b2cf0d4aae"  # no controller: the pod uid
    devices = {d.device_id: d for b in batches for d in b.devices}
    assert devices[f"{N0}/gpu0"].gpu_model is None

    ledger = _ledger(sqlite_url)
    expected = {(f"{N0}/gpu{i}", TRAIN0) for i in range(4)} | {(f"{N0}/gpu{i}", vllm) for i in (4, 5)}
    expected |= {(f"{N1}/gpu{i}", TRAIN1) for i in range(8)} | set(FREE)
    assert set(ledger) == expected
    assert all((r["present_s"], r["observed_s"], r["busy_s"]) == (300.0, 0.0, 0.0) for r in ledger.values())
    assert sum(r["present_s"] for k, r in ledger.items() if k[1]) == 4200.0
    assert sum(r["present_s"] for r in ledger.values()) == 4800.0


def test_slots_do_not_depend_on_how_the_window_is_cut(tmp_path: Path) -> None:
    """Slots are assigned per collection, so 2-minute queries give the samples one query gives."""
    with fake_azure(tmp_path, _log_analytics(_fixture())) as fake:
        samples = {}
        for chunk_s in (3600, 120):
            with _connector(fake.url, fake.ca_path, query_chunk_s=chunk_s) as conn:
                batches = list(conn.collect(H10, H11))
            frame = pl.concat([b.samples for b in batches])
            samples[chunk_s] = frame.sort("device_id", "ts_ms", "metric", "workload_key")
    # InsightsMetrics: 1 + 30 queries; KubePodInventory: 1 + 3 (the 2-minute windows with GPU rows).
    assert len(fake.requests) == 1 + 30 + 1 + 3
    assert samples[120].equals(samples[3600]) and samples[120].height == 14 * 5 * 3 + 2 * 5


def test_partial_result_is_not_ingested(tmp_path: Path, sqlite_url: str) -> None:
    body = _fixture()
    body["error"] = {
        "code": "PartialError",
        "message": "There were some errors when processing your query.",
        "details": [
            {
                "code": "EngineError",
                "message": "Query result set has exceeded the internal record count limit",
            }
        ],
    }
    with fake_azure(tmp_path, lambda r: Reply(200, body)) as fake, _connector(fake.url, fake.ca_path) as conn:
        with pytest.raises(RetriableError, match="partial result.*PartialError.*lower query_chunk_s"):
            list(conn.collect(H10, H11))
        engine = make_engine(sqlite_url)
        try:
            with pytest.raises(RetriableError):
                ingest_window(engine, "aks", conn, H10, H11)
            with engine.connect() as db:
                assert db.execute(select(LedgerHour.__table__)).all() == []
                state = db.execute(select(ConnectorState.__table__)).mappings().one()
        finally:
            engine.dispose()
    assert state["watermark"] is None and state["status"] == "FAILED_CONNECTION"


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (
            401,
            r"authentication failed \(HTTP 401.*Next step: check tenant_id/client_id/client_secret.*az login",
        ),
        (403, r"permission denied \(HTTP 403.*Next step: grant .* Log Analytics Reader on the workspace"),
        (400, r"HTTP 400"),
    ],
)
def test_refusals_are_fatal_with_the_next_step(tmp_path: Path, status: int, message: str) -> None:
    error = {"error": {"code": "Refused", "message": f"refused with {status}"}}
    with (
        fake_azure(tmp_path, lambda r: Reply(status, error)) as fake,
        _connector(fake.url, fake.ca_path, max_retries=3) as conn,
        pytest.raises(FatalSourceError, match=message),
    ):
        list(conn.collect(H10, H11))
    assert len(fake.requests) == 1  # never retried


def test_throttling_is_retried_then_succeeds_and_5xx_runs_out(tmp_path: Path) -> None:
    answers = [
        Reply(429, {"error": {"code": "TooManyRequests", "message": "slow down"}}, {"Retry-After": "0"})
    ]
    fixture = _log_analytics(_fixture())
    with (
        fake_azure(tmp_path, lambda r: answers.pop(0) if answers else fixture(r)) as fake,
        _connector(fake.url, fake.ca_path, max_retries=2, backoff_s=0) as conn,
    ):
        batches = list(conn.collect(H10, H11))
    assert len(fake.requests) == 3  # the refused try, the rows, the inventory
    assert batches[0].samples.height == 14 * 5 * 3 + 2 * 5

    busy = {"error": {"code": "Busy", "message": "try later"}}
    with (
        fake_azure(tmp_path, lambda r: Reply(503, busy)) as fake,
        _connector(fake.url, fake.ca_path, max_retries=1, backoff_s=0) as conn,
        pytest.raises(RetriableError, match="HTTP 503"),
    ):
        list(conn.collect(H10, H11))
    assert len(fake.requests) == 2  # the first try and max_retries = 1 retry


def test_secret_never_shows_and_half_a_service_principal_is_refused() -> None:
    config = AzureMonitorConfig(
        name="aks", workspace_id="w", tenant_id="t", client_id="c", client_secret="s3cr3t-value"
    )
    assert "s3cr3t-value" not in repr(config)
    half = AzureMonitorConfig(name="aks", workspace_id="w", tenant_id="t")
    with pytest.raises(Exception, match="go together"):
        AzureMonitorConnector(half)._logs_client()
    with pytest.raises(ValueError, match="workspace_id"):
        AzureMonitorConfig(name="aks")
