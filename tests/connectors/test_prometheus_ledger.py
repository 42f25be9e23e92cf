"""The ``prometheus`` connector against a real Prometheus, through the real ingest, to exact ledger rows.

The fleet (node ``dgx-01``, scraped every 15 s, 2025-03-03 10:00–13:00 UTC):

* GPU A (full H100): pod ``train-1`` (project llm, team research) until 10:30, then ``train-2``
  (project vision) until 12:00 — the pod labels change mid-hour — then no pod; SM activity 0.8,
  0.4, 0.02 (ratios); 500 W; energy +7,500 J per 15 s.
* GPU B (full H100, no profiling fields): GPU util 60 %, 300 W, energy +4,500 J per 15 s; an
  exporter outage 11:20:00–11:40:00 (no samples; the counter kept counting) and a driver reload at
  12:30:00 (the counter restarts from 2,250 J).
* GPU C in MIG mode: instance GI 1 ``3g.40gb`` runs pod ``infer-0`` (GR engine 0.9), GI 2
  ``4g.40gb`` is empty (0.0); the GPU draws 700 W, +10,500 J per 15 s.

Scrapes are at 10:00:00 … 13:00:00 every 15 s and the connector keeps the scrape's own timestamps
(tests/prom/test_prom_outage.py pins scrapes off the quarter minute and an outage).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import polars as pl
import pytest
from ledger_rows import hour_rows, row_checker
from prom.promserver import running_prometheus, series_text
from sqlalchemy import Engine, select

from connectors.prometheus import PrometheusConfig, PrometheusConnector
from service.ledger.ingest import ingest_window
from service.models import Device

MIB = 1024 * 1024
H10 = dt.datetime(2025, 3, 3, 10, tzinfo=dt.UTC)
T0 = int(H10.timestamp())
N = 721  # readings 10:00:00 … 13:00:00, every 15 s
A, B, C = (f"GPU-{c * 8}-0000-4000-8000-00000000000{i}" for i, c in enumerate("abc", 1))
GI1, GI2 = f"MIG-{C}-1", f"MIG-{C}-2"
TRAIN1, TRAIN2, INFER = "k8s:ml/train-1/trainer", "k8s:ml/train-2/trainer", "k8s:serving/infer-0/server"


def _gpu(uuid: str, index: int, **extra: str) -> dict[str, str]:
    return {
        "UUID": uuid,
        "gpu": str(index),
        "device": f"nvidia{index}",
        "pci_bus_id": f"00000000:{index + 7:02X}:00.0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "dgx-01",
        "job": "dcgm",
        "instance": "dgx-01:9400",
        **extra,
    }


def _fleet() -> str:
    """OpenMetrics of the fleet: readings i = 0 … 720, scraped at T0 + 15 i s."""
    out: dict[str, list[str]] = {}

    def put(field: str, labels: dict[str, str], idx: range | list[int], value) -> None:  # noqa: ANN001
        ts = [T0 + 15 * i for i in idx]
        out.setdefault(field, []).append(series_text(field, labels, ts, [value(i) for i in idx]))

    pods = [
        (range(0, 120), {"namespace": "ml", "pod": "train-1", "container": "trainer",
                         "label_project": "llm", "label_team": "research"}, 0.8, 100, 40000),
        (range(120, 480), {"namespace": "ml", "pod": "train-2", "container": "trainer",
                           "label_project": "vision"}, 0.4, 100, 20000),
        (range(480, N), {}, 0.02, 0, 0),
    ]  # fmt: skip
    for idx, pod, sm, util, used in pods:
        labels = _gpu(A, 0, **pod)
        put("DCGM_FI_PROF_SM_ACTIVE", labels, idx, lambda i, sm=sm: sm)
        put("DCGM_FI_DEV_GPU_UTIL", labels, idx, lambda i, u=util: u)
        put("DCGM_FI_DEV_POWER_USAGE", labels, idx, lambda i: 500.0)
        put("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", labels, idx, lambda i: 1_000_000_000 + 7_500_000 * i)
        put("DCGM_FI_DEV_FB_USED", labels, idx, lambda i, u=used: u)
        put("DCGM_FI_DEV_FB_FREE", labels, idx, lambda i, u=used: 81559 - u)
        put("DCGM_FI_DEV_GPU_TEMP", labels, idx, lambda i: 60)

    up = [i for i in range(N) if not 320 <= i < 400]  # outage: no readings 11:20:00 … 11:39:45
    labels = _gpu(B, 1)
    put("DCGM_FI_DEV_GPU_UTIL", labels, up, lambda i: 60)
    put("DCGM_FI_DEV_POWER_USAGE", labels, up, lambda i: 300.0)
    energy_b = {
        i: 5_000_000_000 + 4_500_000 * i if i < 600 else 2_250_000 + 4_500_000 * (i - 600) for i in up
    }
    put("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", labels, up, energy_b.__getitem__)
    put("DCGM_FI_DEV_FB_USED", labels, up, lambda i: 10000)
    put("DCGM_FI_DEV_FB_FREE", labels, up, lambda i: 71047)
    put("DCGM_FI_DEV_FB_RESERVED", labels, up, lambda i: 512)
    put("DCGM_FI_DEV_GPU_TEMP", labels, up, lambda i: 55)

    every = range(N)
    parent = _gpu(C, 2)
    put("DCGM_FI_DEV_GPU_UTIL", parent, every, lambda i: 0)  # unsupported under MIG: reads 0
    put("DCGM_FI_DEV_POWER_USAGE", parent, every, lambda i: 700.0)
    put("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", parent, every, lambda i: 2_000_000_000 + 10_500_000 * i)
    put("DCGM_FI_DEV_GPU_TEMP", parent, every, lambda i: 50)
    gi1 = _gpu(
        C, 2, GPU_I_ID="1", GPU_I_PROFILE="3g.40gb", namespace="serving", pod="infer-0", container="server"
    )
    gi2 = _gpu(C, 2, GPU_I_ID="2", GPU_I_PROFILE="4g.40gb")
    for labels, active, used in ((gi1, 0.9, 30000), (gi2, 0.0, 0)):
        put("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, every, lambda i, a=active: a)
        put("DCGM_FI_DEV_FB_USED", labels, every, lambda i, u=used: u)
        put("DCGM_FI_DEV_FB_FREE", labels, every, lambda i, u=used: 40240 - u)
    return "".join("".join(parts) for parts in out.values())


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), _fleet()) as url:
        yield url


def _connector(url: str) -> PrometheusConnector:
    config = PrometheusConfig(name="dc1", url=url, step_s=15, region="dc1", label_selector='{job="dcgm"}')
    return PrometheusConnector(config)


def test_collect_reads_raw_samples_without_lookback_fill(prometheus_url: str) -> None:
    with _connector(prometheus_url) as connector:
        batches = list(connector.collect(H10, H10 + dt.timedelta(hours=3, seconds=1)))
    samples = pl.concat([b.samples for b in batches])
    gpu_b = samples.filter((pl.col("device_id") == B) & (pl.col("metric") == "gpu_util"))
    # 721 scrapes minus the 80 of the outage: no 5-minute lookback repeats the last value.
    assert gpu_b.height == N - 80
    assert {d.device_id for b in batches for d in b.devices} == {A, B, GI1, GI2}  # C itself is no device


def test_ingest_gives_exact_ledger_rows(engine: Engine, prometheus_url: str) -> None:
    with _connector(prometheus_url) as connector:
        result = ingest_window(engine, "dc1", connector, H10, H10 + dt.timedelta(hours=3))
    assert result.devices == 4
    rows = hour_rows(engine)
    assert len(rows) == 13
    check = row_checker(rows)

    # GPU A, 10:00: train-1 has readings 10:00:00–10:29:45 (120 × 15 s = 1800 s) at SM 80 % →
    # busy 1440 s; its counter deltas 120 × 7,500 J = 900,000 J. train-2 from 10:30:00: 1800 s at
    # 40 % → 720 s busy, 900,000 J. The chain continues across the label change: no gap at 10:30.
    common_a = {"node": "dgx-01", "region": "dc1", "gpu_fraction": 1.0, "default_metric": "sm_active"}
    check((A, 10, TRAIN1), present_s=1800.0, observed_s=1800.0, busy_s=1440.0, idle_s=0.0,
          busy_s_gpu_util=1800.0, energy_j=900_000.0, power_avg_w=500.0, mem_used_max_b=40000.0 * MIB,
          mem_total_b=81559.0 * MIB, temp_max_c=60.0, project="llm", team="research", namespace="ml",
          workload="train-1", **common_a)  # fmt: skip
    check((A, 10, TRAIN2), present_s=1800.0, observed_s=1800.0, busy_s=720.0, idle_s=0.0,
          energy_j=900_000.0, project="vision", team=None, workload="train-2", **common_a)  # fmt: skip
    # 11:00: all train-2: 3600 s × 40 % = 1440 s busy; 240 deltas × 7,500 J = 1,800,000 J.
    check((A, 11, TRAIN2), present_s=3600.0, observed_s=3600.0, busy_s=1440.0, energy_j=1_800_000.0)
    # 12:00: no pod labels → unallocated ('' workload); SM 2 % < 5 % → all idle, 72 s busy.
    check((A, 12, ""), present_s=3600.0, observed_s=3600.0, busy_s=72.0, idle_s=3600.0,
          busy_s_gpu_util=0.0, energy_j=1_800_000.0, project=None, mem_used_max_b=0.0)  # fmt: skip

    # GPU B: no SM activity, so GPU util (60 %) is the default metric.
    common_b = {"default_metric": "gpu_util", "mem_total_b": (10000 + 71047 + 512) * MIB * 1.0}
    check((B, 10, ""), present_s=3600.0, observed_s=3600.0, busy_s=2160.0, idle_s=0.0,
          energy_j=1_080_000.0, power_avg_w=300.0, **common_b)  # fmt: skip
    # 11:00: the reading at 11:19:45 covers max_gap = 30 s (to 11:20:15); the next comes at 11:40:00.
    # Unobserved 11:20:15–11:40:00 = 1185 s → observed 3600 − 1185 = 2415 s, busy 2415 × 0.6 = 1449 s.
    # Present stays 3600 s (a 20-minute silence is under presence_gap = 1 h). Energy: the counter
    # kept counting through the outage, so its delta 11:19:45 → 11:40:00 (81 × 4,500 J = 364,500 J)
    # counts: 79 × 4,500 + 364,500 + 80 × 4,500 = 1,080,000 J.
    check((B, 11, ""), present_s=3600.0, observed_s=2415.0, busy_s=1449.0, idle_s=0.0,
          energy_j=1_080_000.0, **common_b)  # fmt: skip
    # 12:00: the driver reload at 12:30:00 drops the counter to 2,250 J: that reading counts from
    # zero, so 239 × 4,500 + 2,250 = 1,077,750 J (never a negative delta).
    check((B, 12, ""), present_s=3600.0, observed_s=3600.0, busy_s=2160.0, energy_j=1_077_750.0, **common_b)

    # GPU C's instances: utilization from GR_ENGINE_ACTIVE (GPU_UTIL reads 0 under MIG); the
    # parent's 700 W and 10,500 J per 15 s split by compute slices: 3/7 → 300 W, 4,500 J per 15 s
    # (1,080,000 J per hour); 4/7 → 400 W, 6,000 J (1,440,000 J per hour).
    for hour in (10, 11, 12):
        check((GI1, hour, INFER), present_s=3600.0, observed_s=3600.0, busy_s=3240.0, idle_s=0.0,
              energy_j=1_080_000.0, power_avg_w=300.0, temp_max_c=50.0, gpu_fraction=3 / 7,
              mig_profile="3g.40gb", default_metric="gpu_util", mem_used_max_b=30000.0 * MIB,
              mem_total_b=40240.0 * MIB, namespace="serving", workload="infer-0")  # fmt: skip
        check((GI2, hour, ""), present_s=3600.0, observed_s=3600.0, busy_s=0.0, idle_s=3600.0,
              energy_j=1_440_000.0, power_avg_w=400.0, gpu_fraction=4 / 7, mig_profile="4g.40gb")  # fmt: skip

    with engine.connect() as conn:
        parents = dict(conn.execute(select(Device.device_id, Device.parent_device_id)).all())
    assert parents == {A: None, B: None, GI1: C, GI2: C}


def test_hour_by_hour_equals_one_window_and_reingest_changes_nothing(
    engine: Engine, prometheus_url: str
) -> None:
    with _connector(prometheus_url) as connector:
        ingest_window(engine, "dc1", connector, H10, H10 + dt.timedelta(hours=3))
        once = hour_rows(engine)
        for hour in (12, 10, 11, 10):  # any order, repeats included
            start = H10.replace(hour=hour)
            ingest_window(engine, "dc1", connector, start, start + dt.timedelta(hours=1))
    again = hour_rows(engine)
    assert again.keys() == once.keys()
    for key, row in once.items():
        assert {k: v for k, v in again[key].items() if k != "id"} == {
            k: v for k, v in row.items() if k != "id"
        }
