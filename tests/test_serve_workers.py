"""``gpu-ledger serve --workers N`` as real processes on a throwaway PostgreSQL database: several
workers answer, exactly one runs the scheduler (the advisory lock in pg_locks; a second ``serve``
waits, and takes over when the first stops), and an ingest committed by another process (the
``ingest`` command) is seen by every worker's next answer (their answer caches are stale at once).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from service.auth.tokens import TokenStore
from service.db import make_engine, migrate
from service.scheduler_lease import PG_LOCK_KEY, PG_LOCK_NAMESPACE

CLI = [sys.executable, "-c", "import sys; from service.cli import app; sys.argv[0] = 'gpu-ledger'; app()"]
WINDOW = {"start": "2025-09-01T00:00:00Z", "end": "2025-09-01T02:00:00Z"}
DASH = """query($w: TimeWindow!) {
  cost(window: $w, groupBy: [PROJECT]) { project cost { amount currency } }
  usage(window: $w, groupBy: [DEVICE]) { device gpuHours }
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_LEDGER_")}
    return {**env, "GPU_LEDGER_DATABASE_URL": url}


@contextmanager
def _serving(
    url: str, config: Path, workers: int, log: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = _free_port()
    args = [*CLI, "serve", "--port", str(port), "--workers", str(workers), "--config", str(config)]
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=_env(url), stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _lock_holders(url: str) -> int:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                        " AND classid = :ns AND objid = :key AND objsubid = 2"
                    ),
                    {"ns": PG_LOCK_NAMESPACE, "key": PG_LOCK_KEY},
                ).scalar_one()
            )
    finally:
        engine.dispose()


def _metric(base: str, headers: dict[str, str], name: str) -> float:
    # a fresh connection each time: with several workers, any of them may answer
    for line in httpx.get(f"{base}/metrics", headers=headers, timeout=10).text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not on /metrics")


def _ask(base: str, headers: dict[str, str]) -> httpx.Response:
    # no keep-alive: every request is a new connection, which any worker may accept
    with httpx.Client(headers={**headers, "Connection": "close"}, timeout=30) as http:
        r = http.post(f"{base}/graphql", json={"query": DASH, "variables": {"w": WINDOW}})
    assert r.status_code == 200, r.text
    assert "errors" not in r.json(), r.text
    return r


def _wait_for(check: Callable[[], bool], what: str, timeout_s: float = 40) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


@pytest.fixture
def pg_service(
    fresh_pg_database: Callable[[], AbstractContextManager[str]], tmp_path: Path
) -> Iterator[tuple[str, Path, dict[str, str]]]:
    with fresh_pg_database() as url:
        migrate(url)
        engine = make_engine(url)
        secret, _ = TokenStore(engine).create("workers-test", ["admin"])
        engine.dispose()
        config = tmp_path / "serve.toml"
        # disabled: the scheduler has nothing to run on its own; `ingest` runs it by hand
        config.write_text('[[connectors]]\nname = "synth"\ntype = "synthetic"\nenabled = false\n')
        yield url, config, {"Authorization": f"Bearer {secret}"}


@pytest.mark.postgres
def test_workers_share_the_ledger_and_one_schedules(pg_service: Any, tmp_path: Path) -> None:
    url, config, headers = pg_service
    with _serving(url, config, 3, tmp_path / "serve3.log") as (base, _proc):
        _wait_for(lambda: _lock_holders(url) == 1, "a worker takes the scheduler lock")
        empty = _ask(base, headers)
        assert empty.json() == {"data": {"cost": [], "usage": []}}
        # Each worker computes the answer once (a miss), then serves it from its own cache.
        misses, bodies = 0, set()
        for _ in range(120):
            r = _ask(base, headers)
            misses += r.headers["x-answer-cache"] == "miss"
            bodies.add(r.content)
            if misses >= 2:
                break
        assert misses >= 2, "every request was answered by the same worker"
        assert bodies == {empty.content}
        time.sleep(1)  # the lease's retries are not a second scheduler either
        assert _lock_holders(url) == 1

        # An ingest committed by another process: every worker's next answer has its rows.
        ingest = subprocess.run(
            [
                *CLI,
                "ingest",
                "synth",
                "--start",
                WINDOW["start"],
                "--end",
                WINDOW["end"],
                "--config",
                str(config),
            ],
            env=_env(url),
            capture_output=True,
            timeout=120,
        )
        assert ingest.returncode == 0, ingest.stderr.decode()
        answers = [_ask(base, headers) for _ in range(30)]
        assert all(a.json()["data"]["cost"] for a in answers), (
            "a worker served the answer from before the ingest"
        )
        assert len({a.content for a in answers}) == 1
        assert len({a.headers["x-answer-cache"] for a in answers} - {"hit", "miss"}) == 0

        # A second serve on the same database answers but does not schedule…
        with _serving(url, config, 1, tmp_path / "serve1.log") as (second, _p):
            assert _metric(second, headers, "gpu_ledger_scheduler_leader") == 0
            assert _lock_holders(url) == 1
            assert _ask(second, headers).content == answers[0].content
            _proc.send_signal(signal.SIGINT)  # …until the first one stops: then it takes over
            _proc.wait(30)
            _wait_for(
                lambda: _metric(second, headers, "gpu_ledger_scheduler_leader") == 1,
                "the second serve takes the scheduler lock",
            )
            assert _lock_holders(url) == 1


def test_workers_are_refused_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    done = subprocess.run([*CLI, "serve", "--workers", "2"], env=_env(url), capture_output=True, timeout=60)
    assert done.returncode == 2
    err = done.stderr.decode()
    assert err.startswith("gpu-ledger: error: --workers 2 needs PostgreSQL: sqlite:///"), err
    assert "--workers 1 (the default)" in err and "Traceback" not in err
    assert not (tmp_path / "w.db").exists()  # refused before anything was created
