"""The ingest pipeline against real databases: idempotent, resumable, counts that add up."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import ClassVar, Literal

import polars as pl
import pytest
from sqlalchemy import Engine, func, select
from sqlmodel import Session

from connectors.base import (
    SAMPLE_SCHEMA,
    ConnectorConfig,
    ConnectorStatus,
    DeviceInfo,
    RetriableError,
    SampleBatch,
    Sampling,
)
from connectors.synthetic import SyntheticConfig, SyntheticConnector
from service.ledger.ingest import ingest_window
from service.models import ConnectorRun, ConnectorState, Device, LedgerDay, LedgerHour, Rejection
from service.pricing.rates import RateCardConfig, sync_rate_cards

UTC = dt.UTC
DAY0 = dt.datetime(2026, 11, 2, tzinfo=UTC)


def synthetic() -> SyntheticConnector:
    return SyntheticConnector(SyntheticConfig(name="demo", type="synthetic", period_s=300.0))


def ledger(engine: Engine) -> pl.DataFrame:
    table = LedgerHour.__table__
    columns = [c for c in table.c if c.name != "id"]
    with engine.connect() as conn:
        rows = conn.execute(
            select(*columns).order_by(table.c.device_id, table.c.hour_index, table.c.workload_key)
        )
        return pl.DataFrame([dict(r._mapping) for r in rows], infer_schema_length=None)


@pytest.mark.slow
def test_reingest_is_a_no_op_and_hourly_equals_one_window(engine: Engine) -> None:
    end = DAY0 + dt.timedelta(hours=6)
    ingest_window(engine, "demo", synthetic(), DAY0, end)
    once = ledger(engine)
    assert once.height > 0
    ingest_window(engine, "demo", synthetic(), DAY0, end)
    assert ledger(engine).equals(once)
    # Hour by hour, in reverse order even, gives the same ledger.
    for hour in reversed(range(6)):
        ingest_window(
            engine, "demo", synthetic(), DAY0 + dt.timedelta(hours=hour), DAY0 + dt.timedelta(hours=hour + 1)
        )
    again = ledger(engine)
    assert again.select("device_id", "hour_index", "workload_key").equals(
        once.select("device_id", "hour_index", "workload_key")
    )
    for column in ("present_s", "observed_s", "busy_s", "idle_s", "energy_j"):
        assert again[column].fill_null(0).to_list() == pytest.approx(
            once[column].fill_null(0).to_list(), abs=1e-6
        )


def test_rollup_matches_hourly_rows_after_late_rewrite(engine: Engine) -> None:
    ingest_window(engine, "demo", synthetic(), DAY0, DAY0 + dt.timedelta(days=1))
    with Session(engine) as session:
        sync_rate_cards(
            session,
            [
                RateCardConfig(
                    name="h100",
                    environment="aws",
                    gpu_model="NVIDIA H100 80GB HBM3",
                    rate_per_gpu_hour="6.88",
                    currency="USD",
                    valid_from=DAY0,
                )
            ],
        )
        session.commit()
    # A late re-ingest of one hour (now priced) must show up in the day's rollup.
    ingest_window(engine, "demo", synthetic(), DAY0 + dt.timedelta(hours=5), DAY0 + dt.timedelta(hours=6))
    with engine.connect() as conn:
        h, d = LedgerHour.__table__, LedgerDay.__table__
        hourly = conn.execute(select(func.sum(h.c.present_s), func.sum(h.c.cost))).one()
        daily = conn.execute(select(func.sum(d.c.present_s), func.sum(d.c.cost), func.sum(d.c.hours))).one()
        rows = conn.execute(select(func.count()).select_from(h)).scalar()
    assert daily[0] == pytest.approx(hourly[0])
    assert daily[1] == hourly[1] and hourly[1] > 0
    assert daily[2] == rows


def test_watermark_status_and_run_counts(engine: Engine) -> None:
    result = ingest_window(engine, "demo", synthetic(), DAY0, DAY0 + dt.timedelta(hours=2))
    assert result.status is ConnectorStatus.OK
    assert result.samples_read == result.samples_accepted + result.samples_rejected
    with Session(engine) as session:
        state = session.get(ConnectorState, "demo")
        run = session.exec(select(ConnectorRun)).one()[0]
        assert state is not None and state.watermark == DAY0 + dt.timedelta(hours=2)
        assert state.status == "OK"
        assert (run.read, run.accepted, run.rejected) == (result.samples_read, result.samples_accepted, 0)
        assert session.exec(select(func.count()).select_from(Device)).one()[0] == result.devices


class _BadConfig(ConnectorConfig):
    pass


class _OneBadDevice:
    """Two devices; one sends a utilization of 250 % and a sample for a device it never described."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = _BadConfig
    sampling = Sampling.every(60.0)

    def discover(self) -> list[DeviceInfo]:
        return [DeviceInfo("GPU-a", "onprem"), DeviceInfo("GPU-b", "onprem")]

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        t0 = int(DAY0.timestamp() * 1000)
        rows = [("GPU-a", t0 + i * 60_000, "gpu_util", 50.0, "", 1.0) for i in range(60)]
        rows += [("GPU-b", t0, "gpu_util", 250.0, "", 1.0), ("GPU-x", t0, "gpu_util", 5.0, "", 1.0)]
        yield SampleBatch(pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row"), self.discover())


def test_bad_samples_are_quarantined_and_good_ones_land(engine: Engine) -> None:
    result = ingest_window(engine, "bad", _OneBadDevice(), DAY0, DAY0 + dt.timedelta(hours=1))
    assert (result.samples_read, result.samples_accepted, result.samples_rejected) == (62, 60, 2)
    with Session(engine) as session:
        reasons = sorted(r.reason for r in session.exec(select(Rejection)).scalars())
        busy = session.exec(select(func.sum(LedgerHour.busy_s))).one()[0]
    assert reasons == [
        "device not described by the connector (1 samples in this batch)",
        "utilization outside 0–100 % (1 samples in this batch)",
    ]
    assert busy == 1800.0


class _Down(_OneBadDevice):
    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        raise RetriableError("connection refused by 127.0.0.1:9")


def test_a_failed_run_keeps_the_watermark_and_says_why(engine: Engine) -> None:
    ingest_window(engine, "x", _OneBadDevice(), DAY0, DAY0 + dt.timedelta(hours=1))
    with pytest.raises(RetriableError):
        ingest_window(engine, "x", _Down(), DAY0 + dt.timedelta(hours=1), DAY0 + dt.timedelta(hours=2))
    with Session(engine) as session:
        state = session.get(ConnectorState, "x")
    assert state is not None
    assert state.status == "FAILED_CONNECTION" and "connection refused" in (state.last_error or "")
    assert state.watermark == DAY0 + dt.timedelta(hours=1)
