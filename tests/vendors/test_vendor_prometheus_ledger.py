"""Intel and Ascend exporters through a real Prometheus and the real ingest, to exact ledger rows.

Every series has the label set of the recorded pages (tests/fixtures/xpum/max1550-node.prom,
tests/fixtures/ascend/910b3-node.prom) plus what a scrape adds (``job``, ``instance``, and
``node`` for Ascend, as a Kubernetes scrape config relabels it); readings every 15 s from 10:00:00
to 12:00:00 UTC are backfilled with promtool and read back by the ``prometheus`` connector with
``exporter = "xpum"`` / ``"ascend"``. The hand totals are in tests/fixtures/xpum/README.md and
tests/fixtures/ascend/README.md.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from ledger_rows import hour_rows, row_checker
from prom.promserver import running_prometheus, series_text
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, select
from sqlmodel import Session
from starlette.testclient import TestClient

from connectors.prometheus import PrometheusConfig, PrometheusConnector
from service.app import create_app
from service.ledger.ingest import ingest_window
from service.models import Device
from service.pricing.rates import RateCardConfig, sync_rate_cards
from service.settings import load_settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MIB = 1024 * 1024
H10 = dt.datetime(2025, 3, 3, 10, tzinfo=dt.UTC)
T0 = int(H10.timestamp())
N = 481  # readings 10:00:00 … 12:00:00, every 15 s
GPU_A, GPU_B = "00000000-0000-0029-0000-002f0bd58086", "00000000-0000-009a-0000-002f0bd58086"
CHIP_0, CHIP_1 = (
    "7C0D3A04-2C204A14-B5100C80-50C61CD1-32C70000",
    "7C0D3A04-2C204A14-B5100C80-50C61CD1-32C70001",
)
TRAIN, PRETRAIN = "k8s:ml/train-xe-0/trainer", "k8s:llm/pretrain-0/worker"
#: (series name, labels, value on the page)
Page = list[tuple[str, dict[str, str], float]]


def page(path: Path) -> Page:
    """A recorded exposition as series, parsed as Prometheus' client parses it."""
    return [
        (s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(path.read_text())
        for s in family.samples
    ]


def _intel() -> str:
    """Hour 10: the page as recorded (GPU A runs the pod at EU 60 %). Hour 11: GPU A's pod is gone
    (no kube_* labels) and its engines idle (compute 0, EU 2 %). Energy counters rise by power
    × 15 s per reading; extra labels are the scrape's."""
    out = []
    scrape = {"job": "xpum", "instance": "xe-node-01:29999"}
    for name, labels, value in page(FIXTURES / "xpum/max1550-node.prom"):
        if "uuid" not in labels:
            continue  # the card line: no GPU
        gpu_a = labels["uuid"] == GPU_A
        per_15s = {GPU_A: 480.5 * 15, GPU_B: 195.25 * 15}[labels["uuid"]]

        def at(
            i: int, name: str = name, value: float = value, gpu_a: bool = gpu_a, step: float = per_15s
        ) -> float:
            if name == "xpum_energy_joules_total":
                return value + step * i
            if gpu_a and i >= 240 and name == "xpum_engine_group_ratio":
                return 0.0
            if gpu_a and i >= 240 and name == "xpum_eu_active_ratio":
                return 0.02
            return value

        idle_labels = {k: v for k, v in labels.items() if not k.startswith("kube_")}
        phases = [(range(0, 240), labels), (range(240, N), idle_labels)] if gpu_a else [(range(N), labels)]
        for idx, lab in phases:
            out.append(series_text(name, lab | scrape, [T0 + 15 * i for i in idx], [at(i) for i in idx]))
    return "".join(out)


def _ascend() -> str:
    """Both hours as recorded (chip 0 runs the pod: AI Core 87 %, overall 92 %; chip 1 idle), but
    the exporter wrote -1 (a failed read) for chip 0's AI Core utilization 11:20:00–11:29:45, and
    chip 1's AI Core reads 4 % in hour 11 (overall stays 0)."""
    out = []
    scrape = {"job": "npu-exporter", "instance": "10.0.0.5:8082", "node": "npu-node-01"}
    for name, labels, value in page(FIXTURES / "ascend/910b3-node.prom"):
        chip0 = labels.get("vdie_id") == CHIP_0

        def at(i: int, name: str = name, value: float = value, chip0: bool = chip0) -> float:
            if name == "npu_chip_info_utilization" and chip0 and 320 <= i < 360:
                return -1.0
            if name == "npu_chip_info_utilization" and not chip0 and i >= 240:
                return 4.0
            return value

        out.append(
            series_text(name, labels | scrape, [T0 + 15 * i for i in range(N)], [at(i) for i in range(N)])
        )
    return "".join(out)


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), _intel() + _ascend()) as url:
        yield url


def _connector(url: str, exporter: str, job: str) -> PrometheusConnector:
    config = PrometheusConfig(
        name=exporter, url=url, step_s=15, exporter=exporter, label_selector=f'{{job="{job}"}}'
    )
    return PrometheusConnector(config)


def test_intel_gpus_land_with_eu_activity_as_busy_and_tiles_folded(
    engine: Engine, prometheus_url: str
) -> None:
    with _connector(prometheus_url, "xpum", "xpum") as connector:
        result = ingest_window(engine, "xpum", connector, H10, H10 + dt.timedelta(hours=2))
    assert result.devices == 2
    rows = hour_rows(engine)
    assert set(rows) == {(GPU_A, 10, TRAIN), (GPU_A, 11, ""), (GPU_B, 10, ""), (GPU_B, 11, "")}
    check = row_checker(rows)
    model = "Intel Data Center GPU Max 1550"
    # GPU A, 10:00: tiles' EU active 62 % and 58 % → 60 % → busy 2160 s (EU activity is the
    # default metric); compute engine group 95 %/85 % → 90 % → 3240 s; 240 energy deltas of
    # 480.5 W × 15 s = 7207.5 J; memory used is the tiles' sum (32 GiB + 30 GiB).
    check((GPU_A, 10, TRAIN), present_s=3600.0, observed_s=3600.0, busy_s=2160.0, idle_s=0.0,
          busy_s_gpu_util=3240.0, default_metric="sm_active", energy_j=1_729_800.0, energy_estimated=False,
          power_avg_w=480.5, mem_used_max_b=float(34359738368 + 32212254720), temp_max_c=61.0,
          gpu_model=model, node="xe-node-01", namespace="ml", workload="train-xe-0")  # fmt: skip
    # 11:00: no pod; EU 2 % < the 5 % idle threshold → 72 s busy, all idle; compute 0.
    check((GPU_A, 11, ""), present_s=3600.0, busy_s=72.0, idle_s=3600.0, busy_s_gpu_util=0.0,
          energy_j=1_729_800.0, workload=None)  # fmt: skip
    # GPU B idle: EU 0.1 %/0 % → 0.05 % → 1.8 s; 195.25 W × 15 s = 2928.75 J per reading.
    for hour in (10, 11):
        check((GPU_B, hour, ""), present_s=3600.0, observed_s=3600.0, busy_s=1.8, idle_s=3600.0,
              busy_s_gpu_util=0.0, energy_j=702_900.0, power_avg_w=195.25,
              mem_used_max_b=float(2147483648 + 1073741824), temp_max_c=41.0, gpu_model=model)  # fmt: skip
    with engine.connect() as conn:
        models = {
            d: (m, v) for d, m, v in conn.execute(select(Device.device_id, Device.gpu_model, Device.vendor))
        }
    assert models == {GPU_A: (model, "intel"), GPU_B: (model, "intel")}
    assert {r["vendor"] for r in rows.values()} == {"intel"}


def test_ascend_npus_land_with_ai_core_as_busy_and_failed_reads_as_gaps(
    engine: Engine, prometheus_url: str
) -> None:
    with _connector(prometheus_url, "ascend", "npu-exporter") as connector:
        result = ingest_window(engine, "ascend", connector, H10, H10 + dt.timedelta(hours=2))
    assert result.devices == 2
    rows = hour_rows(engine)
    assert set(rows) == {(CHIP_0, 10, PRETRAIN), (CHIP_0, 11, PRETRAIN), (CHIP_1, 10, ""), (CHIP_1, 11, "")}
    check = row_checker(rows)
    common = {"gpu_model": "Ascend 910B3", "node": "npu-node-01", "default_metric": "sm_active"}
    # Chip 0, 10:00: AI Core 87 % → 3132 s busy; overall 92 % → 3312 s; no energy counter: the
    # estimate is 352.6 W × 3600 s; HBM 52314 of 65536 MiB.
    check((CHIP_0, 10, PRETRAIN), present_s=3600.0, observed_s=3600.0, busy_s=3132.0, idle_s=0.0,
          busy_s_gpu_util=3312.0, energy_j=1_269_360.0, energy_estimated=True, power_avg_w=352.6,
          mem_used_max_b=52314.0 * MIB, mem_total_b=65536.0 * MIB, temp_max_c=57.0, namespace="llm",
          workload="pretrain-0", **common)  # fmt: skip
    # 11:00: AI Core read -1 from 11:20:00 to 11:29:45: the 11:19:45 reading covers 30 s (to
    # 11:20:15), the next good one comes at 11:30:00 → 585 s unobserved: 3015 s × 87 % = 2623.05 s.
    # Overall utilization never failed: 3312 s. Presence and power are untouched.
    check((CHIP_0, 11, PRETRAIN), present_s=3600.0, observed_s=3015.0, busy_s=2623.05,
          busy_s_gpu_util=3312.0, energy_j=1_269_360.0, **common)  # fmt: skip
    # Chip 1: idle at 0 %; in hour 11 AI Core 4 % < 5 % → 144 s busy, still all idle.
    check((CHIP_1, 10, ""), present_s=3600.0, busy_s=0.0, idle_s=3600.0, energy_j=96.9 * 3600, **common)
    check((CHIP_1, 11, ""), present_s=3600.0, busy_s=144.0, idle_s=3600.0, busy_s_gpu_util=0.0, **common)
    assert {r["vendor"] for r in rows.values()} == {"huawei"}


RULES = """
[[attribution]]
name = "project-from-namespace"
source = "k8s.namespace"
dimension = "project"
values = { ml = "ML", llm = "LLM" }
"""
QUERY = """query($w: TimeWindow!) { cost(window: $w, groupBy: [VENDOR, PROJECT, OWNER_RULE]) {
  vendor project ownerRule unallocated cost { amount currency } } }"""


def test_intel_and_ascend_hours_land_in_cost_by_project_with_the_rule_that_named_them(
    engine: Engine, prometheus_url: str, tmp_path: Path
) -> None:
    """Rate cards: 2.50 USD per Max 1550 hour, 1.50 USD per Ascend 910B3 hour. The pods' namespaces
    (k8s.namespace facts from the exporters' labels) name the projects through one rule: GPU A's
    hour 10 is ML's (2.50), chip 0's two hours LLM's (3.00); the other device-hours are nobody's —
    GPU A's hour 11 and GPU B's two (7.50), chip 1's two (3.00). Total 6 device-hours × 2.50 + …
    = 16.00 USD."""
    config = tmp_path / "ledger.toml"
    url = engine.url.render_as_string(hide_password=False)
    config.write_text(f'database_url = "{url}"\n[auth]\nanonymous_read = true\n' + RULES)
    settings = load_settings(config)
    with Session(engine) as session:
        cards = [
            RateCardConfig(name=name, environment="onprem", gpu_model=model, rate_per_gpu_hour=Decimal(rate),
                           currency="USD", valid_from=H10)
            for name, model, rate in (("max1550", "Intel Data Center GPU Max 1550", "2.50"),
                                      ("910b3", "Ascend 910B3", "1.50"))
        ]  # fmt: skip
        sync_rate_cards(session, cards)
        session.commit()
    end = H10 + dt.timedelta(hours=2)
    for exporter, job in (("xpum", "xpum"), ("ascend", "npu-exporter")):
        with _connector(prometheus_url, exporter, job) as connector:
            ingest_window(engine, exporter, connector, H10, end, attribution_rules=settings.attribution)
    with TestClient(create_app(settings, engine)) as client:
        window = {"start": H10.isoformat(), "end": end.isoformat()}
        body = client.post("/graphql", json={"query": QUERY, "variables": {"w": window}}).json()
    assert "errors" not in body, body
    got = sorted(
        (r["vendor"], r["project"] or "", r["ownerRule"] or "", r["unallocated"], r["cost"]["amount"])
        for r in body["data"]["cost"]
    )
    assert got == [
        ("huawei", "", "", True, "3.000000000"),
        ("huawei", "LLM", "project-from-namespace", False, "3.000000000"),
        ("intel", "", "", True, "7.500000000"),
        ("intel", "ML", "project-from-namespace", False, "2.500000000"),
    ]
    assert sum(Decimal(r[4]) for r in got) == Decimal("16.00")
