"""Issue 12's "done when", end to end: a GPU Operator node's hour in a real Prometheus → the ledger.

The history (``tests/fixtures/recorded/operator/mig_flex_history.py`` says where each label and
value comes from): node ``gpu-node-07``, 10:00–11:00 UTC, scraped every 15 s as the GPU Operator's
ServiceMonitor does (``honorLabels: false``): GPU 0 is MIG with seven ``1g.10gb`` instances in flex
mode (two held by pods; every instance repeats the whole GPU's power and energy counter), GPU 1
runs a training pod whose labels arrive as ``exported_*``, GPU 2 is idle. Backfilled with promtool
into a real Prometheus, read by the real ``prometheus`` connector, ingested by the real ingest.

Hand-computed from the power trace (∫P dt; the energy counter grows by P × 15 s per scrape):

* GPU 0: 350 W × 1800 s + 490 W × 1800 s = 1,512,000 J = 0.42 kWh (not 7× = 2.94 kWh), each
  ``1g`` instance 1/7 of it: 216,000 J, 60 W on average.
* GPU 1: 560 W × 1800 s + 700 W × 1800 s = 2,268,000 J = 0.63 kWh, owned by the training pod.
* GPU 2: 70 W × 3600 s = 252,000 J = 0.07 kWh, unallocated (the exporter pod's own ``pod`` label
  is not an owner).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.recorded.operator import mig_flex_history as fx
from prom.promserver import running_prometheus
from sqlalchemy import Engine, select

from connectors.prometheus import PrometheusConfig, PrometheusConnector
from connectors.sdk import ConnectorStatus
from service.ledger.ingest import ingest_window
from service.models import Device, LedgerHour

U0, U1, U2 = fx.UUIDS
HOUR = 3600.0
INFER, EMBED = "k8s:serving/llm-infer-0/server", "k8s:serving/embed-0/embed"
TRAIN = "k8s:research/train-llama-0/pytorch"
KWH = 3_600_000.0


@pytest.fixture(scope="module", params=["hostname", "Hostname"], ids=["main-hostname", "4.8.2-Hostname"])
def prometheus_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The history with the node in ``hostname`` (exporter main, #655) or ``Hostname`` (≤ 4.8.2)."""
    workdir: Path = tmp_path_factory.mktemp("operator")
    with running_prometheus(workdir, fx.history(hostname_label=request.param)) as url:
        yield url


def _ingest(engine: Engine, url: str) -> tuple[list[dict], dict[str, dict]]:
    config = PrometheusConfig(
        name="operator", url=url, step_s=15, label_selector='{job="nvidia-dcgm-exporter"}'
    )
    with PrometheusConnector(config) as connector:
        result = ingest_window(engine, "operator", connector, fx.START, fx.START + dt.timedelta(hours=1))
    assert result.status == ConnectorStatus.OK
    with engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(select(LedgerHour.__table__)).mappings()]
        devices = {r["device_id"]: dict(r) for r in conn.execute(select(Device.__table__)).mappings()}
    return rows, devices


def test_operator_node_hour_gives_per_gpu_energy_owners_and_unallocated(
    engine: Engine, prometheus_url: str
) -> None:
    rows, devices = _ingest(engine, prometheus_url)

    # Devices: the two whole GPUs and GPU 0's seven instances; GPU 0 itself is no ledger device.
    parents = {d: info["parent_device_id"] for d, info in devices.items()}
    instances = sorted(d for d, p in parents.items() if p == U0)
    assert len(instances) == 7 and set(parents) == {U1, U2, *instances}
    assert parents[U1] is None and parents[U2] is None
    for device_id in instances:
        assert devices[device_id]["mig_profile"] == "1g.10gb"
        assert devices[device_id]["gpu_fraction"] == pytest.approx(1 / 7)
    assert {info["node"] for info in devices.values()} == {fx.NODE}

    # One row per device for 10:00 (nothing of 11:00 is in the window).
    assert len(rows) == 9 and {r["hour_start"].hour for r in rows} == {10}
    by_device = {r["device_id"]: r for r in rows}
    assert len(by_device) == 9

    # Energy per physical GPU is ∫P dt, not 7× for the MIG GPU.
    per_gpu: dict[str, float] = {}
    for r in rows:
        gpu = parents[r["device_id"]] or r["device_id"]
        per_gpu[gpu] = per_gpu.get(gpu, 0.0) + r["energy_j"]
    assert per_gpu == pytest.approx({U0: 1_512_000.0, U1: 2_268_000.0, U2: 252_000.0}, abs=0.01)
    assert {g: round(j / KWH, 6) for g, j in per_gpu.items()} == {U0: 0.42, U1: 0.63, U2: 0.07}
    for device_id in instances:
        assert by_device[device_id]["energy_j"] == pytest.approx(216_000.0, abs=0.001)
        assert by_device[device_id]["power_avg_w"] == pytest.approx(60.0, abs=0.001)
        assert by_device[device_id]["energy_estimated"] is False
    assert by_device[U1]["power_avg_w"] == pytest.approx(630.0)
    assert by_device[U2]["power_avg_w"] == pytest.approx(70.0)

    # Owners: the busy pods (exported_* labels), never the exporter's own pod.
    owners = {r["device_id"]: r["workload_key"] for r in rows if r["workload_key"]}
    assert sorted(owners.values()) == sorted([INFER, EMBED, TRAIN])
    assert owners[U1] == TRAIN
    assert all("gpu-operator" not in r["workload_key"] for r in rows)
    infer = next(d for d, w in owners.items() if w == INFER)
    embed = next(d for d, w in owners.items() if w == EMBED)
    assert {infer, embed} <= set(instances)
    assert (by_device[infer]["namespace"], by_device[infer]["workload"]) == ("serving", "llm-infer-0")
    assert (by_device[U1]["namespace"], by_device[U1]["workload"]) == ("research", "train-llama-0")
    # GR engine 0.8 and 0.25 on the held instances (GPU_UTIL reads 0 under MIG); GPU 1 at 100 %.
    assert by_device[infer]["busy_s"] == pytest.approx(2880.0)
    assert by_device[embed]["busy_s"] == pytest.approx(900.0)
    assert by_device[U1]["busy_s"] == pytest.approx(HOUR)

    # Unallocated: the idle GPU and the five free instances, all idle all hour.
    free = {d for d in by_device if d not in owners}
    assert free == {U2} | (set(instances) - {infer, embed})
    for device_id in free:
        r = by_device[device_id]
        assert (r["workload_key"], r["namespace"], r["workload"]) == ("", None, None)
        assert (r["busy_s"], r["idle_s"]) == (0.0, HOUR)

    # Every row: observed ≤ present ≤ 1 h (here the whole hour is seen on every device).
    for r in rows:
        assert r["observed_s"] <= r["present_s"] <= HOUR
        assert (r["present_s"], r["observed_s"]) == (HOUR, HOUR)
        assert r["node"] == fx.NODE
