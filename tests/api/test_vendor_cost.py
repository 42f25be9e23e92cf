"""A mixed fleet by vendor, end to end: AMD's device-metrics-exporter (its recorded page's label
sets, tests/fixtures/amd/) and NVIDIA's dcgm-exporter series scraped into a real Prometheus, read by
the ``prometheus`` connector (``exporter = "amd"`` and the default ``dcgm``), ingested and priced by
rate card, then ``cost(groupBy: [VENDOR])`` over GraphQL — SQLite and PostgreSQL.

Fleet, 2025-12-01 10:00–12:00 UTC, a reading every 15 s (481 readings, 10:00:00 … 12:00:00):

* AMD node ``mi300-node-01``, three MI300X (rate card 2.00 USD per GPU-hour):
  GPU 0 pod ``llm/train-7`` at 80 % GFX activity, 600 W (+9,000 J per 15 s);
  GPU 1 idle (0 %), 100 W (+1,500 J), carrying the exporter's own pod as Prometheus attaches it;
  GPU 2 Slurm job 4242 of alice at 50 %, 400 W (+6,000 J).
* NVIDIA ``dgx-01``: one H100 (3.00 USD per GPU-hour), 30 % GPU util; the ``dcgm`` profile names
  its vendor (a source naming none gets it from the model name: tests/vendors/test_vendor_ingest.py).

Hand totals: every device is present both hours → AMD 3 × 2 = 6 GPU-hours × 2.00 = 12.00 USD
(8.00 held by the pod and the job, 4.00 unallocated); NVIDIA 2 GPU-hours × 3.00 = 6.00 USD
(unallocated); 18.00 USD in all.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import Gql
from prom.promserver import running_prometheus, series_text
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, select
from sqlmodel import Session

from connectors.prometheus import PrometheusConfig, PrometheusConnector
from service.attribution.rules import AttributionRule
from service.ledger.ingest import ingest_window
from service.models import Device, GpuRate, LedgerHour

PAGE = Path(__file__).resolve().parents[1] / "fixtures" / "amd" / "device-metrics-exporter.prom"
MIB = 1024 * 1024
H10 = dt.datetime(2025, 12, 1, 10, tzinfo=dt.UTC)
T0 = int(H10.timestamp())
N = 481
AMD_MODEL, NV_MODEL = "AMD Instinct MI300X", "NVIDIA H100 80GB HBM3"
G0, G1, G2 = "692251001124", "692251001125", "692251001126"
H100 = "GPU-dddddddd-0000-4000-8000-000000000001"
TRAIN, JOB = "k8s:llm/train-7/trainer", "slurm:4242"


def _amd_labels() -> dict[str, dict[str, str]]:
    """The recorded page's label set of each GPU (by serial number), as the exporter writes them."""
    family = next(f for f in text_string_to_metric_families(PAGE.read_text()) if f.name == "gpu_gfx_activity")
    return {s.labels["serial_number"]: dict(s.labels) for s in family.samples}


def _fleet() -> str:
    out: list[str] = []
    idx = range(N)
    ts = [T0 + 15 * i for i in idx]

    def put(name: str, labels: dict[str, str], value) -> None:  # noqa: ANN001
        out.append(series_text(name, labels, ts, [value(i) for i in idx]))

    amd = _amd_labels()
    # GPU 1 is idle: the exporter writes pod="", and a scrape with honor_labels: false keeps its
    # target's own pod there — the exporter's
    amd[G1] |= {"pod": "amdgpu-metrics-exporter-x7k2p", "namespace": "kube-amd-gpu"}
    for serial, util, watts in ((G0, 80, 600.0), (G1, 0, 100.0), (G2, 50, 400.0)):
        labels = {**amd[serial], "job": "amd", "instance": "mi300-node-01:5000"}
        put("gpu_gfx_activity", labels, lambda i, u=util: u)
        put("gpu_power_usage", labels, lambda i, w=watts: w)
        put("gpu_energy_consumed", labels, lambda i, w=watts: 1e12 + w * 15 * 1e6 * i)  # µJ
        put("gpu_used_vram", labels, lambda i, s=serial: {G0: 150000, G1: 283, G2: 98304}[s])
        put("gpu_total_vram", labels, lambda i: 196592)
        put("gpu_junction_temperature", labels, lambda i, s=serial: {G0: 71, G1: 40, G2: 63}[s])
    nv = {"UUID": H100, "gpu": "0", "modelName": NV_MODEL, "Hostname": "dgx-01", "job": "dcgm"}
    put("DCGM_FI_DEV_GPU_UTIL", nv, lambda i: 30)
    put("DCGM_FI_DEV_POWER_USAGE", nv, lambda i: 500.0)
    put("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", nv, lambda i: 3_000_000_000 + 7_500_000 * i)
    return "".join(out)


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), _fleet()) as url:
        yield url


def _ingest(engine: Engine, url: str, rules: tuple[AttributionRule, ...] = ()) -> None:
    with Session(engine) as session:
        for model, price in ((AMD_MODEL, "2.00"), (NV_MODEL, "3.00")):
            rate = GpuRate(source_kind="rate_card", source_ref="list", environment="onprem", gpu_model=model,
                           valid_from=H10 - dt.timedelta(days=30), effective_per_gpu_hour=Decimal(price),
                           currency="USD")  # fmt: skip
            session.add(rate)
        session.commit()
    later = H10 + dt.timedelta(hours=5)
    for name, exporter in (("amd", "amd"), ("dcgm", "dcgm")):
        config = PrometheusConfig(
            name=name, url=url, step_s=15, exporter=exporter, label_selector=f'{{job="{exporter}"}}'
        )
        with PrometheusConnector(config, clock=lambda: later) as connector:
            result = ingest_window(
                engine, name, connector, H10, H10 + dt.timedelta(hours=2), attribution_rules=rules
            )
        assert result.devices == {"amd": 3, "dcgm": 1}[name]


def test_amd_exporter_history_gives_exact_ledger_rows_and_cost_by_vendor(
    engine: Engine, prometheus_url: str, gql: Gql
) -> None:
    _ingest(engine, prometheus_url)
    with engine.connect() as conn:
        rows = {
            (r.device_id, r.hour_start.hour, r.workload_key): r
            for r in conn.execute(select(LedgerHour.__table__))
        }
        vendors = dict(conn.execute(select(Device.device_id, Device.vendor)).all())
    assert vendors == {G0: "amd", G1: "amd", G2: "amd", H100: "nvidia"}
    assert len(rows) == 8
    for hour in (10, 11):
        # 240 readings an hour; each counter delta (µJ ÷ 10⁶) is watts × 15 s
        for key, busy, joules, watts in (((G0, hour, TRAIN), 2880.0, 2_160_000.0, 600.0),
                                         ((G1, hour, ""), 0.0, 360_000.0, 100.0),
                                         ((G2, hour, JOB), 1800.0, 1_440_000.0, 400.0)):  # fmt: skip
            r = rows[key]
            assert (r.present_s, r.observed_s, r.busy_s) == (3600.0, 3600.0, busy), key
            assert r.energy_j == pytest.approx(joules, abs=1e-6) and r.power_avg_w == watts, key
            assert (r.vendor, r.gpu_model, r.node, r.default_metric) == (
                "amd",
                AMD_MODEL,
                "mi300-node-01",
                "gpu_util",
            )
            assert r.mem_total_b == 196592.0 * MIB and r.cost == Decimal("2"), key
        assert (
            rows[(G0, hour, TRAIN)].namespace == "llm"
            and rows[(G0, hour, TRAIN)].mem_used_max_b == 150000.0 * MIB
        )
        assert rows[(G1, hour, "")].idle_s == 3600.0 and rows[(G1, hour, "")].temp_max_c == 40.0
        assert rows[(G2, hour, JOB)].user_name == "alice" and rows[(G2, hour, JOB)].workload == "4242"
        assert (rows[(H100, hour, "")].vendor, rows[(H100, hour, "")].cost) == ("nvidia", Decimal("3"))

    window = {"start": H10.isoformat(), "end": (H10 + dt.timedelta(hours=2)).isoformat()}
    q = """query($w: TimeWindow!){ cost(window: $w, groupBy: [VENDOR]) {
      vendor unallocated cost { amount currency } gpuHours unpricedGpuHours } }"""
    body = gql(q, {"w": window})
    assert "errors" not in body, body
    # cost keeps time nobody held apart: GPU 1 and the H100 ran no workload
    assert body["data"]["cost"] == [
        {"vendor": "amd", "unallocated": False, "cost": {"amount": "8.000000000", "currency": "USD"},
         "gpuHours": 4.0, "unpricedGpuHours": 0.0},
        {"vendor": "amd", "unallocated": True, "cost": {"amount": "4.000000000", "currency": "USD"},
         "gpuHours": 2.0, "unpricedGpuHours": 0.0},
        {"vendor": "nvidia", "unallocated": True, "cost": {"amount": "6.000000000", "currency": "USD"},
         "gpuHours": 2.0, "unpricedGpuHours": 0.0},
    ]  # fmt: skip
    only = gql(q.replace("groupBy: [VENDOR]", 'groupBy: [VENDOR], filter: {vendor: ["amd"]}'), {"w": window})
    assert [(r["vendor"], r["gpuHours"]) for r in only["data"]["cost"]] == [("amd", 4.0), ("amd", 2.0)]
    devices = gql('{ devices(filter: {vendor: ["nvidia"]}) { edges { node { deviceId vendor gpuModel } } } }')
    assert devices["data"]["devices"]["edges"] == [
        {"node": {"deviceId": H100, "vendor": "nvidia", "gpuModel": NV_MODEL}}
    ]


def test_the_amd_pod_and_slurm_job_are_owned_by_rules_on_the_exporters_facts(
    engine: Engine, prometheus_url: str, gql: Gql
) -> None:
    # the exporter's labels become facts (k8s.namespace, slurm.partition): [[attribution]] rules name
    # the owners, and each row records which rule did
    rules = (
        AttributionRule(name="ns-project", source="k8s.namespace", dimension="project"),
        AttributionRule(name="partition-project", source="slurm.partition", dimension="project",
                        values={"gpu": "hpc-batch"}),
    )  # fmt: skip
    _ingest(engine, prometheus_url, rules)
    window = {"start": H10.isoformat(), "end": (H10 + dt.timedelta(hours=2)).isoformat()}
    q = """query($w: TimeWindow!){ cost(window: $w, groupBy: [VENDOR, PROJECT, OWNER_RULE]) {
      vendor project ownerRule unallocated cost { amount } gpuHours } }"""
    body = gql(q, {"w": window})
    assert "errors" not in body, body
    got = {(r["vendor"], r["project"], r["ownerRule"], r["unallocated"]): (r["cost"]["amount"], r["gpuHours"])
           for r in body["data"]["cost"]}  # fmt: skip
    # 2 GPU-hours each at 2.00 (AMD) and 3.00 (NVIDIA) USD
    assert got == {
        ("amd", "llm", "ns-project", False): ("4.000000000", 2.0),
        ("amd", "hpc-batch", "partition-project", False): ("4.000000000", 2.0),
        ("amd", None, None, True): ("4.000000000", 2.0),
        ("nvidia", None, None, True): ("6.000000000", 2.0),
    }
