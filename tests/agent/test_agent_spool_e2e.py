"""End to end: agent → real service (killed and restarted mid-run) → staging → ledger.

Two simulated hours of a 4-GPU node sampled every 5 s on a fake clock; the service (``gpu-ledger
serve`` in a subprocess, SQLite file) is killed at 00:40 and restarted at 01:15 agent time. The
ledger built from what reached the service must equal the ledger of the same readings ingested
without any interruption, and a replayed batch must be acknowledged as a duplicate.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_fakes import FakeClock, FakeSampler, ReferenceConnector
from sqlalchemy import Engine, select

from service.agent.config import AgentSettings
from service.agent.loop import Agent
from service.agent.ship import Shipper
from service.agent.spool import Spool
from service.agent_source import AgentConfig, AgentConnector
from service.db import make_engine
from service.ledger.ingest import ingest_window
from service.models import LedgerHour
from service.timeutil import floor_hour

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # a real serve process, killed and restarted

# The agent's fake clock runs three hours behind the real one: the service checks sample times
# against its real clock (none older than the connector's backfill_days, none in the future).
T0 = floor_hour(dt.datetime.now(dt.UTC)) - dt.timedelta(hours=3)
END = T0 + dt.timedelta(hours=2)
KILL_AT, RESTART_AT = T0 + dt.timedelta(minutes=40), T0 + dt.timedelta(minutes=75)
TOKEN = "e2e-token-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServiceProcess:
    """``gpu-ledger serve`` on a port, started and killed by the test."""

    def __init__(self, config: Path, port: int, log: Path):
        self.config, self.port, self.log = config, port, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        exe = Path(sys.executable).parent / "gpu-ledger"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(exe), "serve", "--config", str(self.config), "--port", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "GPU_LEDGER_LOG_LEVEL": "WARNING"},
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise AssertionError(f"service did not start:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # SIGKILL: no graceful shutdown, as in a crash
            self.proc.wait(10)


def _ledger(engine: Engine) -> list[tuple[Any, ...]]:
    table = LedgerHour.__table__
    columns = [c for c in table.c if c.name != "id"]
    with engine.connect() as conn:
        rows = conn.execute(
            select(*columns).order_by(table.c.device_id, table.c.hour_start, table.c.workload_key)
        )
        return [tuple(r) for r in rows]


def test_service_outage_loses_nothing_and_counts_nothing_twice(
    tmp_path: Path, _sqlite_template: Path
) -> None:
    db, reference_db = tmp_path / "service.db", tmp_path / "reference.db"
    shutil.copyfile(_sqlite_template, db)
    shutil.copyfile(_sqlite_template, reference_db)
    port = _free_port()
    config = tmp_path / "service.toml"
    config.write_text(
        f'database_url = "sqlite:///{db}"\n'
        f'[[connectors]]\ntype = "agent"\nname = "node-a"\ntoken = "{TOKEN}"\n'
        "period_s = 5\nenabled = false\n"  # the test ingests; the service only stages
    )
    service = ServiceProcess(config, port, tmp_path / "service.log")
    replay: dict[str, bytes] = {}

    def on_sleep(now: dt.datetime) -> None:
        if now >= KILL_AT and service.proc is not None and service.proc.poll() is None and now < RESTART_AT:
            service.kill()
        elif now >= KILL_AT + dt.timedelta(minutes=10) and not replay and spool.pending():
            replay["batch"] = spool.pending()[0].read_bytes()  # spooled during the outage
        elif now >= RESTART_AT and service.proc is not None and service.proc.poll() is not None:
            service.start()

    clock = FakeClock(T0, on_sleep)
    settings = AgentSettings(
        service_url=f"http://127.0.0.1:{port}",
        token=TOKEN,
        name="node-a",
        agent_id="node-a-host",
        spool_dir=tmp_path / "spool",
        metrics_port=0,
        backoff_cap_s=120,
    )
    spool = Spool(settings.spool_dir, settings.agent_id, settings.name)
    sampler = FakeSampler(clock, n=4)
    try:
        service.start()
        with httpx.Client(timeout=5) as client:
            shipper = Shipper(client, settings.batches_url, TOKEN, cap_s=120, rng=random.Random(7))
            agent = Agent(
                settings, sampler=sampler, spool=spool, shipper=shipper, clock=clock, sleep=clock.sleep
            )
            agent.run(until=END)
            assert agent.ticks == 1440 and agent.tick_errors == 0
            assert spool.pending() == [], "the agent drained its spool after the restart"
            assert replay and service.starts == 2, "the service was killed, and batches spooled meanwhile"
            assert list((settings.spool_dir / "rejected").iterdir()) == []

            replayed = _post_raw(client, settings.batches_url, tmp_path, replay["batch"])
            assert replayed.status_code == 200 and replayed.json()["duplicate"] is True
    finally:
        service.kill()

    engine, reference = make_engine(f"sqlite:///{db}"), make_engine(f"sqlite:///{reference_db}")
    try:
        connector = AgentConnector(AgentConfig(name="node-a", token=TOKEN, period_s=5), engine=engine)
        result = ingest_window(engine, "node-a", connector, T0, END)
        assert result.samples_read == 1440 * 4 * 7 and result.samples_rejected == 0
        ingest_window(reference, "node-a", ReferenceConnector(sampler, T0, END, 5.0), T0, END)  # type: ignore[arg-type]
        got, want = _ledger(engine), _ledger(reference)
        assert len(want) > 8 and got == want
        present_s = sum(r.present_s for r in _rows(engine))
        assert present_s == 4 * 2 * 3600  # every second of every GPU, once
        ingest_window(engine, "node-a", connector, T0, END)  # re-ingesting changes nothing
        assert _ledger(engine) == want
    finally:
        engine.dispose()
        reference.dispose()


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "replay.batch"
    path.write_bytes(data)
    return path


def _post_raw(client: httpx.Client, url: str, tmp_path: Path, data: bytes) -> httpx.Response:
    payload = Spool(tmp_path / "replay", "x", "node-a").payload(_write(tmp_path, data))
    return client.post(url, content=json.dumps(payload), headers={"Authorization": f"Bearer {TOKEN}"})


def _rows(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(select(LedgerHour.__table__)))
