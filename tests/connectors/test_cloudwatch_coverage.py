"""CloudWatch ``SampleCount`` coverage at each retention band, against moto over the wire.

Clock 2026-03-20 00:00. The agent publishes one reading a minute (its default
``metrics_collection_interval``, 60 s: amazon-cloudwatch-agent ``translator/translate/agent/
ruleInterval.go`` at ab55b8d, which ``nvidia_gpu`` inherits). The same run is written at three
ages, and the connector must ask for it at the period CloudWatch keeps there:

* 2026-03-19, 1-minute data (younger than 15 days);
* 2026-02-01, 47 days back: 5-minute periods;
* 2026-01-01, 78 days back: 1-hour periods.

A coarse datapoint covers ``SampleCount × 60 s`` of its period, not all of it: the issue's GPU that
ran 10:15–16:15 is 6 GPU-hours (21,600 present seconds), not 7.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import polars as pl
import pytest
from awsfake.fixtures import cloudwatch_config
from awsfake.server import CallLog, put_points
from sqlalchemy import Engine, select

from connectors.cloudwatch import CloudWatchConnector, client_factory, expand
from service.db import make_engine
from service.ledger.ingest import ingest_window
from service.models import LedgerHour

NOW = dt.datetime(2026, 3, 20, tzinfo=dt.UTC)
H = dt.timedelta(hours=1)
M = dt.timedelta(minutes=1)
UTIL = "nvidia_smi_utilization_gpu"
COLUMNS = ("present_s", "observed_s", "busy_s_gpu_util")


@pytest.fixture
def engine(sqlite_url: str) -> Any:
    eng = make_engine(sqlite_url)
    yield eng
    eng.dispose()


def _dims(instance: str) -> dict[str, str]:
    return {
        "index": "0",
        "InstanceId": instance,
        "InstanceType": "g5.xlarge",
        "host": "h",
        "name": "NVIDIA A10G",
    }


def _put_minutes(cloudwatch: Any, instance: str, day: dt.datetime, minutes: list[int]) -> None:
    """Util 50 % at each of ``minutes`` (minutes of ``day``)."""
    put_points(
        cloudwatch, "CWAgent", UTIL, _dims(instance), [day + m * M for m in minutes], [50.0] * len(minutes)
    )


def _rows(engine: Engine) -> dict[tuple[str, int], tuple[float, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(select(LedgerHour.__table__)).mappings().all()
    return {(r["device_id"], r["hour_start"].hour): tuple(r[c] for c in COLUMNS) for r in rows}


def _run_10_15_to_16_15() -> list[int]:
    """Minutes of 10:15–16:15 with the agent down 13:00–13:10."""
    return [m for m in range(10 * 60 + 15, 16 * 60 + 15) if not 13 * 60 <= m < 13 * 60 + 10]


@pytest.mark.slow
def test_sample_count_gives_covered_seconds_at_each_retention_band(
    moto: str, aws_client: Callable[..., Any], engine: Engine
) -> None:
    cloudwatch = aws_client("cloudwatch")
    recent, five, hourly = (
        dt.datetime(2026, 3, 19, tzinfo=dt.UTC),
        dt.datetime(2026, 2, 1, tzinfo=dt.UTC),
        dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    )
    _put_minutes(cloudwatch, "i-0recent", recent, _run_10_15_to_16_15())
    _put_minutes(cloudwatch, "i-0hourly", hourly, _run_10_15_to_16_15())
    # 10:17–11:43 with 11:01 and 11:02 missing
    _put_minutes(cloudwatch, "i-0five", five, [m for m in range(617, 703) if m not in (661, 662)])

    log = CallLog()
    config = cloudwatch_config(moto)
    assert config.collection_interval_s == 60

    def make_client(session: Any, service: str, region: str) -> Any:
        return log.attach(client_factory(config)(session, service, region))

    with CloudWatchConnector(config, make_client=make_client, clock=lambda: NOW) as connector:
        stats: dict[dt.datetime, set[tuple[int, str]]] = {}
        for day in (recent, five, hourly):
            log.calls.clear()
            ingest_window(engine, "aws", connector, day + 10 * H, day + 17 * H)
            stats[day] = {
                (q["MetricStat"]["Period"], q["MetricStat"]["Stat"])
                for call in log.calls
                for q in call["MetricDataQueries"]
            }
        rows = _rows(engine)
        # the bands: raw minutes need no count; 5-minute and 1-hour periods ask for SampleCount
        assert stats[recent] == {(60, "Average")}
        assert stats[five] == {(300, "Average"), (300, "SampleCount")}
        assert stats[hourly] == {(3600, "Average"), (3600, "SampleCount")}

        # 10:15–16:15, down 13:00–13:10: the same rows from 1-minute and from 1-hour data.
        # Hour 10 has 45 samples (placed at its end: hour 11 has data, hour 9 none), hour 13 has
        # 50 (neighbours on both sides: at its start, the rest present and unobserved), hour 16
        # has 15 (placed at its start).
        run = {
            10: (2700.0, 2700.0, 1350.0),
            11: (3600.0, 3600.0, 1800.0),
            12: (3600.0, 3600.0, 1800.0),
            13: (3600.0, 3000.0, 1500.0),
            14: (3600.0, 3600.0, 1800.0),
            15: (3600.0, 3600.0, 1800.0),
            16: (900.0, 900.0, 450.0),
        }
        for instance in ("i-0recent", "i-0hourly"):
            got = {h: v for (d, h), v in rows.items() if d == f"{instance}/gpu0"}
            assert got == run, instance
            assert sum(v[0] for v in got.values()) == 6 * 3600  # 6 GPU-hours, not 7
            assert sum(v[1] for v in got.values()) == 21_000

        # 5-minute periods: 10:15 has 3 samples (→ 10:17–10:20), 11:00 has 3 (11:00–11:03, then
        # 2 minutes present and unobserved), 11:40 has 3 (11:40–11:43). Present 10:17–11:43.
        five_rows = {h: v for (d, h), v in rows.items() if d == "i-0five/gpu0"}
        assert five_rows == {10: (2580.0, 2580.0, 1290.0), 11: (2580.0, 2460.0, 1230.0)}

        # hour by hour gives the same rows: where a partial period lies does not depend on the window
        for hour in range(10, 17):
            ingest_window(engine, "aws", connector, hourly + hour * H, hourly + (hour + 1) * H)
        assert _rows(engine) == rows


def test_expand_places_covered_readings_against_the_neighbouring_datapoint() -> None:
    """Unit rule at an agent interval of 10 s and 5-minute periods read as 1-minute readings:
    12 samples = 120 s = 2 readings; 9 samples = 90 s rounds to 2 (1.5 → 2); 40 samples are capped
    at the period (5 readings); 0 samples: nothing."""
    points = pl.DataFrame(
        {
            "series": [0, 0, 0, 1, 2],
            "ts_s": [0, 300, 600, 0, 0],
            "value": [10.0, 20.0, 30.0, 40.0, 50.0],
            "n": [12.0, 40.0, 9.0, 0.0, 40.0],
        }
    )
    got = expand(points, 300, 60, 10, 0, 900)
    assert got.sort("series", "ts_ms").rows() == [
        (0, 180_000, 10.0),  # first period, only the next has data: at its end
        (0, 240_000, 10.0),
        *[(0, 300_000 + i * 60_000, 20.0) for i in range(5)],
        (0, 600_000, 30.0),  # last period: at its start
        (0, 660_000, 30.0),
        *[(2, i * 60_000, 50.0) for i in range(5)],
    ]
    # clipped to [lo, hi) after placement; periods outside it are only neighbours
    assert expand(points, 300, 60, 10, 300, 600)["ts_ms"].to_list() == [
        300_000 + i * 60_000 for i in range(5)
    ]
