"""Raw samples keep the scrape's timestamps: an outage, through a real Prometheus and the real ingest.

One H100 (``DCGM_FI_DEV_GPU_UTIL`` only), scraped every 60 s at second 1 of each minute (a scrape
offset), 2025-05-05 09:00:01 … 12:20:01 UTC; GPU util 80 % for scrapes before 10:30, then 40 %.
Two silences: an exporter outage 10:58:01 … 11:09:01 (12 scrapes missing, under the 1 h presence
gap: present but unobserved) and the node gone after 12:20:01 (longer than the presence gap).
``step_s = 60``: a reading stands until the field's next scrape, at most 2 × 60 s.

Hand-computed, window 10:00–13:00:

* 10:00: the 09:59:01 reading (80 %) covers 10:00:00–10:00:01; 80 % then runs to the 10:30:01
  scrape (1,801 s), 40 % from there. The last scrape before the outage, 10:57:01, stands 120 s,
  to 10:59:01: observed 3,541 s, busy 0.8 × 1,801 + 0.4 × 1,740 = 2,136.8 s; present 3,600 s.
* 11:00: observed again from the 11:10:01 scrape: 3,600 − 601 = 2,999 s, busy 0.4 × 2,999 =
  1,199.6 s; present 3,600 s (13 minutes < presence gap).
* 12:00: the last scrape, 12:20:01, stands 120 s: observed = present = 1,321 s (12:00:00–12:22:01),
  busy 528.4 s.

The ``last_over_time`` grid (what the cloud subclasses still read) stamps each scrape at the next
full minute, 59 s later: the GPU looks observed to 11:00:00 (3,600 s) and to 12:23:00 (1,380 s), a
step longer at each outage; the contrast is pinned below.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from prom.promserver import running_prometheus, series_text
from sqlalchemy import Engine, select

from connectors.prometheus import PrometheusConfig, PrometheusConnector
from service.ledger.ingest import ingest_window
from service.models import LedgerHour

H10 = dt.datetime(2025, 5, 5, 10, tzinfo=dt.UTC)
T0 = int(H10.timestamp())
GPU = "GPU-0a0a0a0a-1111-4222-8333-444444444444"
LABELS = {"UUID": GPU, "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-1", "job": "dcgm"}


def _scrapes() -> list[int]:
    first, last = T0 - 3600 + 1, T0 + 2 * 3600 + 20 * 60 + 1  # 09:00:01 … 12:20:01
    outage = range(T0 + 3481, T0 + 4142)  # 10:58:01 … 11:09:01
    return [t for t in range(first, last + 1, 60) if t not in outage]


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    ts = _scrapes()
    values = [80.0 if t < T0 + 1800 else 40.0 for t in ts]
    text = series_text("DCGM_FI_DEV_GPU_UTIL", LABELS, ts, values)
    with running_prometheus(tmp_path_factory.mktemp("outage"), text) as url:
        yield url


def _hours(engine: Engine) -> dict[int, tuple[float, float, float]]:
    table = LedgerHour.__table__
    with engine.connect() as conn:
        rows = conn.execute(select(table.c.hour_start, table.c.present_s, table.c.observed_s, table.c.busy_s))
        return {r.hour_start.hour: (r.present_s, r.observed_s, r.busy_s) for r in rows}


def _ingest(engine: Engine, connector: PrometheusConnector) -> None:
    with connector:
        ingest_window(engine, "dc", connector, H10, H10 + dt.timedelta(hours=3))


def _config(url: str) -> PrometheusConfig:
    return PrometheusConfig(name="dc", url=url, step_s=60, label_selector='{job="dcgm"}')


def test_the_scrape_times_fix_observed_seconds_at_each_outage(engine: Engine, prometheus_url: str) -> None:
    assert _scrapes()[60:63] == [T0 + 1, T0 + 61, T0 + 121]  # 10:00:01 is scrape 60
    _ingest(engine, PrometheusConnector(_config(prometheus_url)))
    hours = _hours(engine)
    assert hours.keys() == {10, 11, 12}
    assert hours[10] == pytest.approx((3600.0, 3541.0, 2136.8), abs=1e-6)
    assert hours[11] == pytest.approx((3600.0, 2999.0, 1199.6), abs=1e-6)
    assert hours[12] == pytest.approx((1321.0, 1321.0, 528.4), abs=1e-6)


class _Grid(PrometheusConnector):
    """The ``last_over_time`` grid (``raw_samples`` False), as the cloud subclasses read it."""


def test_the_grid_shows_a_step_more_at_each_outage(engine: Engine, prometheus_url: str) -> None:
    _ingest(engine, _Grid(_config(prometheus_url)))
    hours = _hours(engine)
    # every reading 59 s late: 80 % to 10:31:00, observed to 11:00:00, again from 11:11:00, to 12:23:00
    assert hours[10] == pytest.approx((3600.0, 3600.0, 0.8 * 1860 + 0.4 * 1740), abs=1e-6)
    assert hours[11] == pytest.approx((3600.0, 2940.0, 0.4 * 2940), abs=1e-6)
    assert hours[12] == pytest.approx((1380.0, 1380.0, 0.4 * 1380), abs=1e-6)
