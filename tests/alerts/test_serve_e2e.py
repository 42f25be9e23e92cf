"""The production path, as a user runs it: `gpu-ledger serve --workers 2 --config …` with a
synthetic connector and an idle_workload rule posting to a real local receiver. The scheduler's
first run ingests a day of the fleet, the alert engine finds its idle notebooks and announces
each once; every worker's /metrics shows the same firing alerts, and `alerts` answers them."""

from __future__ import annotations

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

from service.db import make_engine, migrate
from service.models import AlertState

CLI = [sys.executable, "-c", "import sys; from service.cli import app; sys.argv[0] = 'gpu-ledger'; app()"]
SECRET = "/hook/e2e-s3cret"


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.postgres
def test_serve_announces_idle_notebooks_once(
    fresh_pg_database: Callable[[], AbstractContextManager[str]], tmp_path: Path
) -> None:
    with fresh_pg_database() as url:
        migrate(url)
        _serve_and_check(url, tmp_path)


def _serve_and_check(url: str, tmp_path: Path) -> None:
    with http_receiver() as hooks:
        config = tmp_path / "c.toml"
        config.write_text(
            f"""
[auth]
anonymous_read = true

[[connectors]]
name = "demo"
type = "synthetic"
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
hours = 2
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
