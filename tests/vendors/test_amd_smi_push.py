"""The amd-smi sampler's readings through the whole agent path: sampled from a fake ``amd-smi``
printing the recorded answers, spooled, shipped to the real push endpoint, read back by the agent
connector and ingested — the AMD GPUs land in the ledger with vendor ``amd`` and AMD's model name
(SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from push_client import NOW, push_client
from sqlalchemy import Engine, select
from test_amd_smi import U0, U1, fake_amd_smi

from connectors.amd_smi import AmdSmiSampler
from service.agent.ship import Shipper
from service.agent.spool import Spool
from service.agent_source import AgentConfig, AgentConnector
from service.ledger.ingest import ingest_window
from service.models import Device, LedgerHour

H = NOW - dt.timedelta(hours=1)  # the hour 05:00–06:00 of the endpoint's clock


def test_amd_smi_readings_reach_the_ledger_with_their_vendor(engine: Engine, tmp_path: Path) -> None:
    clock = [H.timestamp()]
    sampler = AmdSmiSampler(
        {"binary": str(fake_amd_smi(tmp_path)), "node": "mi300-node-01"}, clock=lambda: clock[0]
    )
    spool = Spool(tmp_path / "spool", "mi300-node-01", "node-a", fsync=False)
    for _ in range(60):  # a reading a minute for the hour
        spool.append(sampler.sample())
        clock[0] += 60.0
    spool.seal()
    with push_client(engine) as client:
        result = Shipper(client, "/api/v1/batches", "a" * 32).ship(spool)
    assert (result.shipped, result.rejected, result.failed) == (1, 0, False)
    connector = AgentConnector(
        AgentConfig(name="node-a", token="a" * 32, period_s=60), engine=engine, clock=lambda: NOW
    )
    ingest_window(engine, "node-a", connector, H, NOW)
    with engine.connect() as conn:
        devices = {
            r.device_id: (r.vendor, r.gpu_model, r.node) for r in conn.execute(select(Device.__table__))
        }  # type: ignore[attr-defined]
        hours = {
            r.device_id: (r.vendor, r.present_s, r.busy_s) for r in conn.execute(select(LedgerHour.__table__))
        }  # type: ignore[attr-defined]
    model = ("amd", "AMD Instinct MI300X", "mi300-node-01")
    assert devices == {U0: model, U1: model}
    # GPU 0 at 87 % GFX activity all hour, GPU 1 idle
    assert hours == {U0: ("amd", 3600.0, 0.87 * 3600.0), U1: ("amd", 3600.0, 0.0)}
