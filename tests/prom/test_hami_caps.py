"""HAMi pods on the Prometheus path: the scheduler's ``hami_vgpu_core_allocated_ratio`` (recorded
exposition, tests/fixtures/hami) and dcgm-exporter's pod series in a real Prometheus, read by the
``prometheus`` connector with ``hami_caps = true`` and priced by a real ingest (SQLite and
PostgreSQL) at 4.00 USD per GPU-hour over 09:00–10:00.

Hand-computed (docs/virtual-gpus.md):

* GPU 0: vision/detect-0 at 30 of 100 cores alone → 0.30 (1.20 USD), nobody 0.70 (2.80 USD).
* GPU 1: ml/capped-0 at 40 cores beside ml/free-a and ml/free-b (0 cores: no cap) measured at
  30 % and 10 % → 0.40 (1.60), 0.60 × 3/4 = 0.45 (1.80), 0.60 × 1/4 = 0.15 (0.60).
* GPU 2: 200 cores (deviceCoreScaling 2), ml/scaled-0's container 1 at 50 → 0.25 (1.00), nobody
  0.75 (3.00).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from prom.promserver import running_prometheus, series_text
from sqlalchemy import Engine, select
from sqlmodel import Session

from connectors.hami_metrics import pod_caps
from connectors.prometheus import PrometheusConfig, PrometheusConnector
from service.ledger.ingest import ingest_window
from service.models import LedgerHour
from service.pricing.rates import RateCardConfig, sync_rate_cards

H09 = dt.datetime(2026, 11, 30, 9, tzinfo=dt.UTC)
H10 = H09 + dt.timedelta(hours=1)
EXPOSITION = Path(__file__).parents[1] / "fixtures" / "hami" / "scheduler-metrics.prom"
GPU0 = "GPU-2f1e0d9c-8b7a-4c6d-9e0f-1a2b3c4d5e6f"
GPU1 = "GPU-7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d"
GPU2 = "GPU-c3d4e5f6-a7b8-4c9d-8e0f-112233445566"
_SERIES = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
SCHEDULER = {"job": "hami-scheduler", "instance": "10.96.0.40:31993"}
#: (GPU, namespace, pod, container, GPU_UTIL %): GPU 1 is time-shared, one series per pod
PODS = [
    (GPU0, "vision", "detect-0", "detector", 80.0),
    (GPU1, "ml", "capped-0", "main", 50.0),
    (GPU1, "ml", "free-a", "main", 30.0),
    (GPU1, "ml", "free-b", "main", 10.0),
    (GPU2, "ml", "scaled-0", "trainer", 60.0),
]


def exposition() -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in EXPOSITION.read_text().splitlines():
        if m := _SERIES.match(line):
            out.append((m.group(1), dict(_LABEL.findall(m.group(2))), float(m.group(3))))
    return out


def history(ts: list[int]) -> str:
    out = []
    for g, (uuid, ns, pod, container, util) in enumerate(PODS):
        labels = {"UUID": uuid, "gpu": str(g), "modelName": "NVIDIA H200", "Hostname": "gpu-node-21",
                  "job": "dcgm", "namespace": ns, "pod": pod, "container": container}  # fmt: skip
        out.append(series_text("DCGM_FI_DEV_GPU_UTIL", labels, ts, [util] * len(ts)))
    for name, labels, value in exposition():
        out.append(series_text(name, labels | SCHEDULER, ts[::2], [value] * len(ts[::2])))
    return "".join(out)


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    start = int(H09.timestamp()) - 600
    ts = [start + 15 * i for i in range(4 * 60 * 2)]  # 08:50–10:50, every 15 s
    with running_prometheus(tmp_path_factory.mktemp("hami"), history(ts)) as url:
        yield url


def connector(url: str, **config: Any) -> PrometheusConnector:
    cfg = PrometheusConfig(name="hami", url=url, step_s=15, label_selector='{job="dcgm"}', **config)
    return PrometheusConnector(cfg, clock=lambda: H10 + dt.timedelta(hours=5))


def shares(url: str, **config: Any) -> dict[tuple[str, str], set[float]]:
    """(device, workload) → the distinct shares of its GPU_UTIL readings in 09:00–10:00."""
    with connector(url, **config) as c:
        batches = list(c.collect(H09, H10))
    out: dict[tuple[str, str], set[float]] = {}
    for b in batches:
        rows = b.samples.filter(b.samples["metric"].cast(str) == "gpu_util")
        for device, workload, share in rows.select("device_id", "workload_key", "share").iter_rows():
            out.setdefault((str(device), str(workload)), set()).add(round(share, 12))
    return out


def test_the_recorded_scheduler_page_gives_each_pods_fraction_on_its_gpu() -> None:
    found = exposition()
    series = [labels | {"__name__": name, "value": value} for name, labels, value in found]
    # the new and the legacy names of one container count once; 0 cores is no cap
    assert pod_caps(series, series) == {
        ("vision", "detect-0", GPU0): 0.30,
        ("ml", "capped-0", GPU1): 0.40,
        ("ml", "scaled-0", GPU2): 0.25,
    }
    legacy_only = [s for s in series if str(s["__name__"])[0] in "vG"]
    assert pod_caps(legacy_only, legacy_only) == pod_caps(series, series)


def test_capped_pods_hold_their_cores_and_the_rest_goes_to_uncapped_pods_or_nobody(
    prometheus_url: str,
) -> None:
    assert shares(prometheus_url, hami_caps=True, hami_selector='{job="hami-scheduler"}') == {
        (GPU0, "k8s:vision/detect-0/detector"): {0.3},
        (GPU0, ""): {0.7},
        (GPU1, "k8s:ml/capped-0/main"): {0.4},
        (GPU1, "k8s:ml/free-a/main"): {0.45},
        (GPU1, "k8s:ml/free-b/main"): {0.15},
        (GPU2, "k8s:ml/scaled-0/trainer"): {0.25},
        (GPU2, ""): {0.75},
    }


def test_off_by_default_and_with_a_selector_matching_nothing_the_exporter_split_stands(
    prometheus_url: str,
) -> None:
    measured = {
        (GPU0, "k8s:vision/detect-0/detector"): {1.0},
        (GPU1, "k8s:ml/capped-0/main"): {round(50 / 90, 12)},
        (GPU1, "k8s:ml/free-a/main"): {round(30 / 90, 12)},
        (GPU1, "k8s:ml/free-b/main"): {round(10 / 90, 12)},
        (GPU2, "k8s:ml/scaled-0/trainer"): {1.0},
    }
    assert shares(prometheus_url) == measured
    assert shares(prometheus_url, hami_caps=True, hami_selector='{job="elsewhere"}') == measured


def test_the_ledger_prices_each_hami_pod_at_its_share(prometheus_url: str, engine: Engine) -> None:
    with Session(engine) as session:
        card = RateCardConfig(name="site", environment="onprem", rate_per_gpu_hour=Decimal("4.00"),
                              currency="USD", valid_from=H09)  # fmt: skip
        sync_rate_cards(session, [card])
        session.commit()
    with connector(prometheus_url, hami_caps=True) as c:
        ingest_window(engine, "hami", c, H09, H10)
    h = LedgerHour.__table__
    with engine.connect() as conn:
        rows = conn.execute(select(h.c.device_id, h.c.workload_key, h.c.cost).where(h.c.hour_start == H09))
        got = {(d, w): c for d, w, c in rows}
    assert got == {
        (GPU0, "k8s:vision/detect-0/detector"): Decimal("1.20"),
        (GPU0, ""): Decimal("2.80"),
        (GPU1, "k8s:ml/capped-0/main"): Decimal("1.60"),
        (GPU1, "k8s:ml/free-a/main"): Decimal("1.80"),
        (GPU1, "k8s:ml/free-b/main"): Decimal("0.60"),
        (GPU2, "k8s:ml/scaled-0/trainer"): Decimal("1.00"),
        (GPU2, ""): Decimal("3.00"),
    }
