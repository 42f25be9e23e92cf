"""idle_workload on the synthetic fleet (idle notebooks, training, inference…) after a real ingest:
the SQL finds exactly the workloads an independent Polars reading of the ledger rows finds — every
one of the last `hours` hours up to the watermark present, observed and idle on all its GPUs."""

from __future__ import annotations

import datetime as dt
import math

import polars as pl
import pytest
from sqlalchemy import Engine, select

from connectors.synthetic import SyntheticConfig, SyntheticConnector
from service.alerts.conditions import SLACK_S, find
from service.alerts.rules import IdleWorkloadRule
from service.ledger.ingest import ingest_window
from service.models import LedgerHour

DAY0 = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)


def _expected(engine: Engine, source: str, last_h: int, hours: int) -> tuple[set[str], int]:
    """The zombies, and how many workloads ran in the last hour."""
    t = LedgerHour.__table__  # type: ignore[attr-defined]
    with engine.connect() as conn:
        rows = conn.execute(
            select(t.c.workload_key, t.c.hour_index, t.c.observed_s, t.c.idle_s).where(t.c.source == source)
        )
        frame = pl.DataFrame([tuple(r) for r in rows], schema=["key", "h", "obs", "idle"], orient="row")
    per_hour = (
        frame.filter((pl.col("key") != "") & (pl.col("h") > last_h - hours) & (pl.col("h") <= last_h))
        .group_by("key", "h")
        .agg(pl.col("obs").sum(), pl.col("idle").sum())
        .filter((pl.col("obs") > 0) & (pl.col("idle") >= pl.col("obs") - SLACK_S))
    )
    counts = per_hour.group_by("key").len()
    running = frame.filter((pl.col("key") != "") & (pl.col("h") == last_h))["key"].n_unique()
    return {f"{source}/{k}" for k in counts.filter(pl.col("len") == hours)["key"].to_list()}, running


@pytest.mark.slow
@pytest.mark.parametrize("hours", [1, 6])
def test_zombies_of_the_synthetic_fleet(engine: Engine, hours: int) -> None:
    connector = SyntheticConnector(SyntheticConfig(name="demo", type="synthetic", period_s=300.0))
    end = DAY0 + dt.timedelta(hours=30)
    ingest_window(engine, "demo", connector, DAY0, end, clock=lambda: end)
    last_h = math.ceil(end.timestamp() / 3600) - 1
    expected, running = _expected(engine, "demo", last_h, hours)
    with engine.connect() as conn:
        found = find(conn, IdleWorkloadRule(name="z", kind="idle_workload", hours=hours), end)
    assert {f.subject_key for f in found} == expected
    # Not vacuous: the fleet's idle notebooks are found, its busy jobs are not.
    assert 0 < len(expected) < running, (len(expected), running)
