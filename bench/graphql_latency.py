"""Benchmark (b): GraphQL cost(groupBy:[PROJECT]) and effectiveCost over 30 days of a 1,000-GPU fleet.

    .venv/bin/python bench/graphql_latency.py [--gpus 1000] [--days 30] [--repeat 30]

Creates a throwaway PostgreSQL database on 127.0.0.1:5432 (or uses --database-url), migrates it,
loads gpus × days × 24 device-hours of ledger rows with COPY (one in five device-hours split
between two workloads, so ~1.2 rows per device-hour), builds the daily rollup with the same
``rebuild_days`` the ingestor runs, starts ``gpu-ledger serve`` on it as a separate process and
times each query over HTTP from this process (median and p95 of --repeat runs after 3 warm-ups).
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
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
from service.ledger.store import rebuild_days
from service.models import LedgerHour

HOUR_S = 3600
PROJECTS = [f"project-{i:02d}" for i in range(40)]
TEAMS = [f"team-{i:02d}" for i in range(12)]
ENVIRONMENTS = np.array(["onprem", "aws", "gcp", "azure"])
MODELS = np.array(["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A10G", "NVIDIA H100 80GB HBM3"])

QUERIES = {
    "cost(groupBy:[PROJECT])": """query($w: TimeWindow!){ cost(window:$w, groupBy:[PROJECT]) {
        project cost { amount currency } idleCost { amount } gpuHours } }""",
    "effectiveCost": """query($w: TimeWindow!){ effectiveCost(window:$w) {
        environment gpuModel gpuHours effectiveGpuHours cost { amount currency }
        costPerGpuHour { amount } costPerEffectiveGpuHour { amount } } }""",
}


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
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=30)
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
    server = None
    try:
        engine = make_engine(url)
        migrate(engine)
        end_day = dt.datetime.now(dt.UTC).date()
        start = dt.datetime.combine(end_day - dt.timedelta(days=args.days), dt.time(), tzinfo=dt.UTC)
        start_hour = int(start.timestamp()) // HOUR_S
        t0 = time.perf_counter()
        rows = ledger_rows(args.gpus, start_hour, args.days * 24)
        load(url, rows)
        with engine.begin() as conn:
            rebuild_days(conn, start_hour // 24, start_hour // 24 + args.days - 1)
            conn.execute(text("ANALYZE"))
        with engine.connect() as conn:
            day_rows = conn.execute(text("select count(*) from ledger_day")).scalar()
        print(
            f"loaded {rows.height:,} ledger rows ({args.gpus * args.days * 24:,} device-hours), "
            f"{day_rows:,} rollup rows in {time.perf_counter() - t0:.1f} s"
        )
        engine.dispose()

        port = free_port()
        env = dict(os.environ, GPU_LEDGER_DATABASE_URL=url, GPU_LEDGER_LOG_LEVEL="warning")
        binary = Path(sys.executable).parent / "gpu-ledger"
        server = subprocess.Popen(
            [str(binary), "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                urllib.request.urlopen(base + "/readyz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        window = {"start": start.isoformat(), "end": (start + dt.timedelta(days=args.days)).isoformat()}
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores; PostgreSQL on 127.0.0.1; "
            f"window {window['start']} – {window['end']}"
        )
        # Whole days come from the daily rollup; a window cut mid-day also reads the edge hours.
        shifted = {
            k: (dt.datetime.fromisoformat(v) - dt.timedelta(hours=7)).isoformat() for k, v in window.items()
        }
        for label, w in (("day-aligned window", window), ("window cut mid-day (7 h offset)", shifted)):
            for name, query in QUERIES.items():
                for _ in range(3):
                    answer = post(base + "/graphql", query, {"w": w})
                    assert not answer.get("errors"), answer
                times = []
                for _ in range(args.repeat):
                    t = time.perf_counter()
                    answer = post(base + "/graphql", query, {"w": w})
                    times.append((time.perf_counter() - t) * 1000)
                    assert not answer.get("errors"), answer
                rows_out = len(next(iter(answer["data"].values())))
                times.sort()
                print(
                    f"{label}, {name}: {rows_out} rows; median {statistics.median(times):.1f} ms, "
                    f"p95 {times[int(0.95 * (len(times) - 1))]:.1f} ms, "
                    f"min {times[0]:.1f} ms over {args.repeat} runs"
                )
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        if created is not None:
            admin = make_engine(args.admin_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{created}" WITH (FORCE)'))
            admin.dispose()


if __name__ == "__main__":
    main()
