"""The recorded G1 answers (``gpu/utilization``, ``gpu/memory/bytes_used``; 8 GPUs × 16 hourly
ALIGN_MEAN points) served over gRPC, through the real ingest, to exact ledger rows.

G1 (``gce_instance`` 4815162342108301234, a3-highgpu-8g) ran 09-08 16:00 → 09-09 08:00 and was
billed 128 GPU-hours. The points are stamped 09-08 17:00 … 09-09 08:00 (end of each hour), so
after the one-period shift they cover 16:00 … 08:00: observed GPU-hours = 8 × 16 = 128.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from gcpfake.build import fixture_series, plain_client
from gcpfake.server import FakeMetricService, running_fake
from sqlalchemy import Engine, select

from connectors.gcp_monitoring import GcpMonitoringConfig, GcpMonitoringConnector
from service.ledger.ingest import ingest_window
from service.models import Device, LedgerHour

PROJECT = "ml-prod-123456"
G1 = "4815162342108301234"
START = dt.datetime(2025, 9, 8, 16, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[FakeMetricService, str]]:
    served = fixture_series("gpu_utilization") + fixture_series("gpu_memory_bytes_used")
    service = FakeMetricService({PROJECT: served}, period_s=3600)
    with running_fake(service) as target:
        yield service, target


def test_fixture_gives_128_observed_gpu_hours(engine: Engine, fake: tuple[FakeMetricService, str]) -> None:
    service, target = fake
    config = GcpMonitoringConfig(name="gcp", projects=[PROJECT], period_s=3600, families=["ops_agent"])
    with plain_client(target) as client, GcpMonitoringConnector(config, client=client) as connector:
        # A wider window than the run: nothing may appear outside 16:00–08:00.
        ingest_window(engine, "gcp", connector, START - dt.timedelta(hours=4), START + dt.timedelta(hours=20))
    aggregated = [r for r in service.requests if r.aggregation.per_series_aligner]
    assert {r.aggregation.alignment_period for r in aggregated} == {dt.timedelta(hours=1)}

    with engine.connect() as conn:
        rows = conn.execute(select(LedgerHour.__table__)).mappings().all()
        devices = conn.execute(select(Device.__table__)).mappings().all()
    assert len(rows) == 128
    assert sum(r["observed_s"] for r in rows) / 3600 == 128.0
    assert all(r["present_s"] == r["observed_s"] == 3600.0 for r in rows)
    hours = sorted({r["hour_start"].replace(tzinfo=dt.UTC) for r in rows})
    assert hours[0] == START and hours[-1] == START + dt.timedelta(hours=15) and len(hours) == 16
    # Busy seconds = Σ util % × 36 s over the 128 points (hand-summed from the fixture).
    assert sum(r["busy_s"] for r in rows) == pytest.approx(357_117.753960, abs=1e-5)
    assert all(r["idle_s"] == 0.0 and r["default_metric"] == "gpu_util" for r in rows)  # every point ≥ 55 %
    by_key = {(r["device_id"], r["hour_start"].replace(tzinfo=dt.UTC)): r for r in rows}
    gpu0 = [r for r in rows if r["device_id"] == f"{G1}/gpu0"]
    assert sum(r["busy_s"] for r in gpu0) == pytest.approx(46_652.814972, abs=1e-6)
    # The oldest point (stamped 17:00: 74.596896 %, 80,531,566,677 B) is the 16:00 hour.
    first = by_key[(f"{G1}/gpu0", START)]
    assert first["busy_s"] == pytest.approx(74.596896 * 36, abs=1e-6)
    assert first["mem_used_max_b"] == 80_531_566_677.0
    # The newest (stamped 09-09 08:00: 78,383,542,643 B) is the 07:00 hour.
    assert by_key[(f"{G1}/gpu0", START + dt.timedelta(hours=15))]["mem_used_max_b"] == 78_383_542_643.0
    assert max(r["mem_used_max_b"] for r in gpu0) == 83_752_169_945.0
    assert {r["mem_total_b"] for r in rows} == {None}  # the fixture has no memory_state="free" series

    assert len(devices) == 8
    d = next(d for d in devices if d["device_id"] == f"{G1}/gpu3")
    assert (d["environment"], d["provider"], d["account"], d["region"], d["instance_id"], d["gpu_model"]) == (
        "gcp",
        "gcp",
        PROJECT,
        "us-central1",
        G1,
        "NVIDIA H100 80GB HBM3",
    )
