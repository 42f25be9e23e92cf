"""A Prometheus that holds no dcgm-exporter series the connector can read: the run is MISSING_DATA and
its lastError says what to check (the selector and the window), not just "0 samples"."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from prom.promserver import running_prometheus, series_text
from sqlmodel import Session

from connectors.prometheus import PrometheusConfig, PrometheusConnector
from connectors.sdk import ConnectorStatus
from service.db import make_engine
from service.ledger.ingest import ingest_window
from service.models import ConnectorState

START = dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)


def test_a_window_with_no_matching_series_says_what_to_check(tmp_path: Path, sqlite_url: str) -> None:
    stamps = [int(START.timestamp()) + 15 * i for i in range(240)]
    other = series_text("node_cpu_seconds_total", {"cpu": "0", "job": "node"}, stamps, [1.0] * len(stamps))
    with running_prometheus(tmp_path, other) as url:
        config = PrometheusConfig(name="prom", url=url, step_s=15, label_selector='{job="dcgm"}')
        engine = make_engine(sqlite_url)
        try:
            with PrometheusConnector(config, clock=lambda: START + dt.timedelta(hours=2)) as connector:
                result = ingest_window(engine, "prom", connector, START, START + dt.timedelta(hours=1))
            with Session(engine) as session:
                state = session.get(ConnectorState, "prom")
        finally:
            engine.dispose()
    assert result.status == ConnectorStatus.MISSING_DATA
    assert state is not None and state.status == ConnectorStatus.MISSING_DATA
    assert state.last_error is not None
    assert state.last_error.startswith('no dcgm-exporter series (DCGM_FI_DEV_GPU_UTIL, DCGM_FI_PROF_*, …')
    assert 'with {job="dcgm"} from 2026-03-02T09:00:00Z' in state.last_error  # the hour of context too
    assert "label_selector matches its series" in state.last_error
