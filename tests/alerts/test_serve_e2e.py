"""The production path, as a user runs it: `gpu-ledger serve --workers 2 --config …` with a
synthetic connector and an idle_workload rule posting to a real local receiver. The scheduler's
first run ingests a day of the fleet, the alert engine finds its idle notebooks and announces
each once; every worker's /metrics shows the same firing alerts, and `alerts` answers them.

The fleet is the real one at the real time, and whether any workload has been idle for the last
two hours depends on when the test runs (on a weekday evening every notebook may have just been
used). So the test first ingests the same day in-process for a few seeds and serves the first
whose fleet holds a zombie now: the served engine must then find one too."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
from notify.smtpserver import free_port
from receiver import http_receiver
from sqlalchemy import select

from connectors.synthetic import SyntheticConfig, SyntheticConnector
from service.alerts.conditions import find
from service.alerts.rules import IdleWorkloadRule
from service.db import make_engine, migrate
from service.ledger.ingest import ingest_window
from service.models import AlertState
from service.timeutil import floor_hour

CLI = [sys.executable, "-c", "import sys; from service.cli import app; sys.argv[0] = 'gpu-ledger'; app()"]
SECRET = "/hook/e2e-s3cret"
HOURS = 2
SEEDS = range(42, 58)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.postgres
def test_serve_announces_idle_notebooks_once(
    fresh_pg_database: Callable[[], AbstractContextManager[str]], sqlite_url: str, tmp_path: Path
) -> None:
    seed = _seed_with_a_zombie_now(sqlite_url)
    with fresh_pg_database() as url:
        migrate(url)
        _serve_and_check(url, tmp_path, seed)


def _seed_with_a_zombie_now(url: str) -> int:
    """The first seed whose fleet has a workload idle for the last ``HOURS`` hours now, as the
    served connector's first run will see it (a day back, up to the end of this hour)."""
    now = dt.datetime.now(dt.UTC)
    if now.minute >= 58:  # the served run must see the same hours: not across the hour's turn
        time.sleep(3660 - now.minute * 60 - now.second)
        now = dt.datetime.now(dt.UTC)
    start, end = floor_hour(now) - dt.timedelta(days=1), floor_hour(now) + dt.timedelta(hours=1)
    engine = make_engine(url)
    try:
        for seed in SEEDS:
            source = f"seed{seed}"
            config = SyntheticConfig(name=source, type="synthetic", period_s=300.0, seed=seed)
            ingest_window(engine, source, SyntheticConnector(config), start, end)
            with engine.connect() as conn:
                found = find(conn, IdleWorkloadRule(name="z", kind="idle_workload", hours=HOURS), now)
            if any(f.subject_key.startswith(f"{source}/") for f in found):
                return seed
    finally:
        engine.dispose()
    pytest.fail(f"no seed in {SEEDS} has a workload idle for the last {HOURS} h at {now:%a %H:%M} UTC")


def _serve_and_check(url: str, tmp_path: Path, seed: int) -> None:
    with http_receiver() as hooks:
        config = tmp_path / "c.toml"
        config.write_text(
            f"""
[auth]
anonymous_read = true

[[connectors]]
name = "demo"
type = "synthetic"
seed = {seed}
period_s = 300
backfill_days = 1
interval_s = 3600

[[alert_channels]]
name = "hook"
type = "webhook"
url = "{hooks.base}{SECRET}"

[[alerts]]
name = "zombie"
kind = "idle_workload"
hours = {HOURS}
channels = ["hook"]
"""
        )
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_LEDGER_")}
        env["GPU_LEDGER_DATABASE_URL"] = url
        log = tmp_path / "serve.log"
        args = [*CLI, "serve", "--port", str(port), "--workers", "2", "--config", str(config)]
        with log.open("wb") as out:
            proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        engine = make_engine(url)
        try:
            deadline = time.monotonic() + 240
            firing: set[str] = set()
            while not firing or len(hooks.posts) < len(firing):
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(1)
                with engine.connect() as conn:
                    stmt = select(AlertState.subject_key).where(AlertState.state == "FIRING")
                    firing = set(conn.execute(stmt).scalars())
            time.sleep(2)  # anything more would arrive now
            assert sorted(b["subjectKey"] for _, b in hooks.posts) == sorted(firing)
            assert {p for p, _ in hooks.posts} == {SECRET}
            assert all(b["state"] == "FIRING" and b["kind"] == "idle_workload" for _, b in hooks.posts)
            for _ in range(4):  # either worker may answer
                with httpx.Client(headers={"Connection": "close"}, timeout=30) as http:
                    text = http.get(f"{base}/metrics").text
                    answer = http.post(f"{base}/graphql", json={"query": "{ alerts { subjectKey } }"}).json()
                gauges = [line for line in text.splitlines() if line.startswith("gpu_ledger_alert_firing{")]
                assert len(gauges) == len(firing), text
                assert {a["subjectKey"] for a in answer["data"]["alerts"]} == firing
            assert "s3cret" not in log.read_text()
        finally:
            engine.dispose()
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
