"""Benchmark: dashboard questions through GraphQL over a synthetic fleet, with and without the
group rollups.

    .venv/bin/python bench/graphql_latency.py [--gpus 1000] [--days 30] [--window-days 30]
        [--mid-day-hours 7] [--repeat 30] [--compare]

Creates a throwaway PostgreSQL database on 127.0.0.1:5432 (or uses --database-url), migrates it,
loads gpus × days × 24 device-hours of ledger rows with COPY (one in five device-hours split
between two workloads, so ~1.2 rows per device-hour), builds every rollup (``ledger_day`` and the
group rollups) with the same ``store.rebuild_days`` the ingestor runs, day by day as an ingest
would, starts ``gpu-ledger serve`` on it as a separate process and times each question over HTTP
from this process (median and p95 of --repeat runs after 3 warm-ups):

* ``cost(groupBy:[PROJECT])`` over the last --window-days whole UTC days;
* the same window shifted back --mid-day-hours (cut mid-day: partial days at both ends);
* ``cost(granularity:MONTH, groupBy:[PROJECT])`` over all --days (monthly cost by project);
* ``effectiveCost`` (grouped by nothing; day-aligned).

``--compare`` also starts a second server whose analytics never choose the group rollups (the
device-level path: ``ledger_day`` + ``ledger_hour`` edges, as before them) and alternates the two
servers request by request, so both see the same machine load; it prints the ratio.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import io
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import numpy as np
import polars as pl
import psycopg
from sqlalchemy import text

from service.db import make_engine, migrate
from service.ledger import rollups
from service.ledger.partitions import ensure_months
from service.ledger.store import rebuild_days
from service.models import LedgerHour

# A server that never reads the group rollups: today's path before them (bench only).
DEVICE_LEVEL_SERVER = (
    "import sys; import service.analytics.window as w; "
    "w.group_rollups_serve = lambda *a, **k: False; "
    "from service.cli import app; sys.argv[0] = 'gpu-ledger'; app()"
)

HOUR_S = 3600
PROJECTS = [f"project-{i:02d}" for i in range(40)]
TEAMS = [f"team-{i:02d}" for i in range(12)]
ENVIRONMENTS = np.array(["onprem", "aws", "gcp", "azure"])
MODELS = np.array(["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A10G", "NVIDIA H100 80GB HBM3"])

COST_BY_PROJECT = """query($w: TimeWindow!){ cost(window:$w, groupBy:[PROJECT]) {
        project cost { amount currency } idleCost { amount } gpuHours } }"""
MONTHLY_COST_BY_PROJECT = """query($w: TimeWindow!){ cost(window:$w, granularity:MONTH, groupBy:[PROJECT]) {
        periodStart project cost { amount currency } gpuHours } }"""
EFFECTIVE_COST = """query($w: TimeWindow!){ effectiveCost(window:$w) {
        environment gpuModel gpuHours effectiveGpuHours cost { amount currency }
        costPerGpuHour { amount } costPerEffectiveGpuHour { amount } } }"""


def ledger_rows(gpus: int, start_hour: int, hours: int, seed: int = 11) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    device = np.repeat(np.arange(gpus), hours)
    hour = np.tile(np.arange(start_hour, start_hour + hours), gpus)
    split = rng.random(device.size) < 0.2
    # A split device-hour becomes two rows of 1800 s with two workloads.
    row_device = np.concatenate([device, device[split]])
    row_hour = np.concatenate([hour, hour[split]])
    present = np.concatenate([np.where(split, 1800.0, 3600.0), np.full(split.sum(), 1800.0)])
    second = np.concatenate([np.zeros(device.size, bool), np.ones(split.sum(), bool)])
    n = row_device.size
    util = rng.beta(2, 2, n)
    idle = np.where(rng.random(n) < 0.15, present, 0.0)
    busy = np.where(idle > 0, 0.0, present * util)
    env = ENVIRONMENTS[row_device % 4]
    rate_nanos = np.select(
        [env == "onprem", env == "aws", env == "gcp"],
        [2_100_000_000, 6_880_000_000, 11_060_000_000],
        12_290_000_000,
    )
    cost = (rate_nanos * present / HOUR_S).round().astype(np.int64)
    project_index = (row_device * 7 + second * 3 + (row_hour // 24) % 5) % len(PROJECTS)
    unallocated = (rng.random(n) < 0.05) & ~second
    workload_key = np.where(unallocated, "", np.char.add("k8s:job-", project_index.astype(str)))
    frame = pl.DataFrame(
        {
            "source": "bench",
            "device_id": np.char.add("GPU-", row_device.astype(str)),
            "workload_key": workload_key,
            "environment": env,
            "provider": pl.Series(env).replace("onprem", None),
            "region": np.where(env == "onprem", "dc1", "region-1"),
            "node": np.char.add("node-", (row_device // 8).astype(str)),
            "gpu_model": MODELS[row_device % 4],
            "gpu_fraction": 1.0,
            "project": pl.Series(np.asarray(PROJECTS)[project_index]).set(pl.Series(unallocated), None),
            "team": pl.Series(np.asarray(TEAMS)[project_index % len(TEAMS)]).set(
                pl.Series(unallocated), None
            ),
            "default_metric": np.where(env == "onprem", "sm_active", "gpu_util"),
            "present_s": present,
            "observed_s": present,
            "busy_s": busy,
            "idle_s": idle,
            "hist_0_1_s": idle,
            "hist_50_75_s": present - idle,
            "obs_s_gpu_util": present,
            "busy_s_gpu_util": np.minimum(present, busy * 1.3),
            "idle_s_gpu_util": idle,
            "energy_j": present * 450.0,
            "cost": cost,
            "idle_cost": (cost * (idle / present)).round().astype(np.int64),
            "currency": "USD",
            "rate_source": np.where(env == "onprem", "tco:dc1", "rate_card:bench"),
            "hour_index": row_hour,
            "day_index": row_hour // 24,
        }
    )
    # Columns the bench leaves at their model defaults (0 seconds, not estimated).
    for column in LedgerHour.__table__.columns:
        if column.name not in frame.columns and not column.nullable and column.name != "id":
            default = column.default.arg if column.default is not None else 0.0
            frame = frame.with_columns(pl.lit(default).alias(column.name))
    hour_start = pl.from_epoch(pl.col("hour_index") * HOUR_S, time_unit="s").dt.replace_time_zone("UTC")
    return frame.with_columns(
        hour_start.alias("hour_start"),
        ((hour_start.dt.year() - 1970) * 12 + hour_start.dt.month() - 1).cast(pl.Int64).alias("month_index"),
        (pl.col("cost").cast(pl.Decimal(24, 9)) / 1_000_000_000).alias("cost"),
        (pl.col("idle_cost").cast(pl.Decimal(24, 9)) / 1_000_000_000).alias("idle_cost"),
    )


def load(url: str, rows: pl.DataFrame) -> None:
    buffer = io.BytesIO()
    rows.write_csv(buffer, null_value="\\N")
    columns = ", ".join(f'"{c}"' for c in rows.columns)
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy(
            f"COPY ledger_hour ({columns}) FROM STDIN WITH (FORMAT csv, HEADER true, NULL '\\N')"
        ) as copy:
            copy.write(buffer.getvalue())
        conn.commit()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, query: str, variables: dict) -> dict:
    body = json.dumps({"query": query, "variables": variables}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def start_server(url: str, device_level: bool) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, GPU_LEDGER_DATABASE_URL=url, GPU_LEDGER_LOG_LEVEL="warning")
    env.setdefault("GPU_LEDGER_AUTH__ANONYMOUS_READ", "true")  # a throwaway database on loopback
    if importlib.util.find_spec("service.api.answer_cache_settings") is not None:
        env.setdefault("GPU_LEDGER_ANSWER_CACHE__MAX_B", "0")  # time the query, not the answer cache
    command = (
        [sys.executable, "-c", DEVICE_LEVEL_SERVER]
        if device_level
        else [str(Path(sys.executable).parent / "gpu-ledger")]
    )
    server = subprocess.Popen(
        [*command, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    wait_ready(base)
    return server, base + "/graphql"


def wait_ready(base: str) -> None:
    """Until ``base``'s /readyz answers (at most ~60 s; the first request then says what is wrong)."""
    for _ in range(600):
        try:
            urllib.request.urlopen(base + "/readyz", timeout=1)
            return
        except OSError:
            time.sleep(0.1)


def window_of(start: dt.datetime, end: dt.datetime) -> dict[str, str]:
    return {"start": start.isoformat(), "end": end.isoformat()}


def answer_rows(answer: dict) -> list:
    assert not answer.get("errors"), answer
    return next(iter(answer["data"].values()))


def rounded(value: object) -> object:
    """Floats to 6 places (the paths add GPU-hours in another order); money is compared exactly."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, list):
        return [rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    return value


def stats(times: list[float]) -> str:
    times = sorted(times)
    p95 = times[math.ceil(0.95 * len(times)) - 1]  # nearest rank: never below the median
    return f"median {statistics.median(times):.1f} ms, p95 {p95:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30, help="days of ledger to load (365: a year)")
    parser.add_argument("--window-days", type=int, default=30, help="the dashboard window: last N days")
    parser.add_argument("--mid-day-hours", type=int, default=7, help="shift of the mid-day window")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--compare", action="store_true", help="also time the device-level path")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--admin-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()

    created = None
    url = args.database_url
    if url is None:
        created = f"gpu_ledger_bench_{uuid.uuid4().hex[:8]}"
        admin = make_engine(args.admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{created}"'))
        url = args.admin_url.rsplit("/", 1)[0] + f"/{created}"
    servers: list[subprocess.Popen] = []
    try:
        engine = make_engine(url)
        migrate(engine)
        end_day = dt.datetime.now(dt.UTC).date()
        start = dt.datetime.combine(end_day - dt.timedelta(days=args.days), dt.time(), tzinfo=dt.UTC)
        end = start + dt.timedelta(days=args.days)
        start_hour = int(start.timestamp()) // HOUR_S
        first_day = start_hour // 24
        t0 = time.perf_counter()
        load_s = rollup_s = 0.0
        # A month of rows at a time (memory), each month's partition made first as an ingest makes it.
        for chunk_day in range(0, args.days, 31):
            days = min(31, args.days - chunk_day)
            rows = ledger_rows(args.gpus, start_hour + chunk_day * 24, days * 24, seed=11 + chunk_day)
            with engine.begin() as conn:
                ensure_months(conn, start_hour + chunk_day * 24, start_hour + (chunk_day + days) * 24 - 1)
            t1 = time.perf_counter()
            load(url, rows)
            load_s += time.perf_counter() - t1
            t1 = time.perf_counter()
            for day in range(first_day + chunk_day, first_day + chunk_day + days):
                with engine.begin() as conn:  # one transaction per day, as the ingest's day chunks
                    rebuild_days(conn, day, day)
            rollup_s += time.perf_counter() - t1
        with engine.begin() as conn:
            conn.execute(text("ANALYZE"))
        # The group rollups' share of the ingest's rebuild: the last 3 days rebuilt again alone.
        t1 = time.perf_counter()
        for day in range(first_day + args.days - 3, first_day + args.days):
            with engine.begin() as conn:
                rollups.rebuild(conn, day, day)
        group_ms = (time.perf_counter() - t1) / 3 * 1000
        with engine.connect() as conn:
            counts = {
                t: conn.execute(text(f"select count(*) from {t}")).scalar()
                for t in ("ledger_hour", "ledger_day", "ledger_group_hour", "ledger_group_day")
            }
        print(
            f"loaded {counts['ledger_hour']:,} ledger rows ({args.gpus * args.days * 24:,} device-hours) "
            f"by COPY in {load_s:.1f} s; rollups in {rollup_s:.1f} s "
            f"({rollup_s / args.days * 1000:.0f} ms a day, of which group rollups {group_ms:.0f} ms): "
            f"ledger_day {counts['ledger_day']:,}, ledger_group_hour {counts['ledger_group_hour']:,}, "
            f"ledger_group_day {counts['ledger_group_day']:,} rows; total {time.perf_counter() - t0:.1f} s"
        )
        engine.dispose()

        server, grouped = start_server(url, device_level=False)
        servers.append(server)
        targets = {"group rollups": grouped}
        if args.compare:
            server, device = start_server(url, device_level=True)
            servers.append(server)
            targets["device level"] = device
        load1 = os.getloadavg()[0]
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, load average {load1:.1f} at start; "
            f"PostgreSQL on 127.0.0.1; data {start.date()} – {end.date()}"
        )
        recent = end - dt.timedelta(days=args.window_days)
        shift = dt.timedelta(hours=args.mid_day_hours)
        questions = {
            f"cost(groupBy:[PROJECT]), {args.window_days} whole days": (
                COST_BY_PROJECT,
                window_of(recent, end),
            ),
            f"same, window cut mid-day (-{args.mid_day_hours} h)": (
                COST_BY_PROJECT,
                window_of(recent - shift, end - shift),
            ),
            f"monthly cost by project, {args.days} days": (MONTHLY_COST_BY_PROJECT, window_of(start, end)),
            f"effectiveCost, {args.window_days} whole days": (EFFECTIVE_COST, window_of(recent, end)),
        }
        for name, (query, w) in questions.items():
            answers = {label: answer_rows(post(target, query, {"w": w})) for label, target in targets.items()}
            for _ in range(2):
                for target in targets.values():
                    answer_rows(post(target, query, {"w": w}))
            if args.compare:
                same = rounded(answers["group rollups"]) == rounded(answers["device level"])
                assert same, f"{name}: the two paths differ"
            times: dict[str, list[float]] = {label: [] for label in targets}
            for _ in range(args.repeat):
                for label, target in targets.items():  # interleaved: both see the same load
                    t = time.perf_counter()
                    answer_rows(post(target, query, {"w": w}))
                    times[label].append((time.perf_counter() - t) * 1000)
            line = f"{name}: {len(answers['group rollups'])} rows; " + "; ".join(
                f"{label} {stats(ts)}" for label, ts in times.items()
            )
            if args.compare:
                ratio = statistics.median(times["device level"]) / statistics.median(times["group rollups"])
                line += f"; ratio {ratio:.1f}×"
            print(line, flush=True)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        for server in servers:
            server.terminate()
            server.wait(10)
        if created is not None:
            admin = make_engine(args.admin_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{created}" WITH (FORCE)'))
            admin.dispose()


if __name__ == "__main__":
    main()
