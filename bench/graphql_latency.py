"""Benchmark: dashboard questions through GraphQL over a synthetic fleet, with and without the
group rollups.

    .venv/bin/python bench/graphql_latency.py [--gpus 1000] [--days 30] [--window-days 30]
        [--mid-day-hours 7] [--repeat 30] [--compare]

Creates a throwaway PostgreSQL database on 127.0.0.1:5432 (or uses --database-url), migrates it,
writes gpus × days × 24 device-hours of ledger rows (one in five device-hours split between two
workloads, so ~1.2 rows per device-hour) as the metrics ingest writes them, a week a transaction
(``bench/dashboard_scale.py``'s loader: ``store.upsert_devices``, ``store.replace_hours`` by COPY,
``store.rebuild_days`` over the week, ``ledger_version.bump``), starts ``gpu-ledger serve`` on it
as a separate process and times each question over HTTP
from this process (median and p95 of --repeat runs after 3 warm-ups):

* ``cost(groupBy:[PROJECT])`` over the last --window-days whole UTC days;
* the same window shifted back --mid-day-hours (cut mid-day: partial days at both ends);
* ``cost(granularity:MONTH, groupBy:[PROJECT])`` over all --days (monthly cost by project);
* ``effectiveCost`` (grouped by nothing; day-aligned).

``--compare`` also starts a second server whose analytics never choose the group rollups (the
device-level path: ``ledger_day`` + ``ledger_hour`` edges, as before them) and alternates the two
servers request by request, so both see the same machine load; it prints the ratio.

A fleet too big to load for every run (10,000 GPUs) is loaded once and measured many times with
``bench/dashboard_scale.py load`` / ``measure`` (same rows, same questions).
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
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl
import psycopg
from sqlalchemy import text

from service.db import make_engine, migrate
from service.ledger import rollups
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
ENVIRONMENTS = ["onprem", "aws", "gcp", "azure"]
MODELS = ["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A10G", "NVIDIA H100 80GB HBM3"]

COST_BY_PROJECT = """query($w: TimeWindow!){ cost(window:$w, groupBy:[PROJECT]) {
        project cost { amount currency } idleCost { amount } gpuHours } }"""
MONTHLY_COST_BY_PROJECT = """query($w: TimeWindow!){ cost(window:$w, granularity:MONTH, groupBy:[PROJECT]) {
        periodStart project cost { amount currency } gpuHours } }"""
EFFECTIVE_COST = """query($w: TimeWindow!){ effectiveCost(window:$w) {
        environment gpuModel gpuHours effectiveGpuHours cost { amount currency }
        costPerGpuHour { amount } costPerEffectiveGpuHour { amount } } }"""


def ledger_rows(gpus: int, start_hour: int, hours: int, seed: int = 11) -> pl.DataFrame:
    """:func:`ledger_frame` with money as ``NUMERIC``-ready Decimals (what :func:`load` COPYs)."""
    return (
        ledger_frame(gpus, start_hour, hours, seed)
        .with_columns(
            (pl.col("cost_nanos").cast(pl.Decimal(24, 9)) / 1_000_000_000).alias("cost"),
            (pl.col("idle_cost_nanos").cast(pl.Decimal(24, 9)) / 1_000_000_000).alias("idle_cost"),
        )
        .drop("cost_nanos", "idle_cost_nanos")
    )


def ledger_frame(gpus: int, start_hour: int, hours: int, seed: int = 11) -> pl.DataFrame:
    """Ledger rows of ``gpus`` devices over ``hours`` hours from ``start_hour``, built column-wise,
    money as integer nanos (``cost_nanos``, ``idle_cost_nanos``: the pricing step's output, what
    ``store.replace_hours`` takes); the devices' attributes are :func:`device_attributes`'."""
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
    env_index = row_device % 4  # ENVIRONMENTS' and MODELS' index

    def by_env(values: Sequence[str | None]) -> pl.Series:
        # strings gathered by index: a numpy string array converts to Polars slowly (3.6 s a week)
        return pl.Series(list(values), dtype=pl.String).gather(env_index)

    rate_nanos = np.array([2_100_000_000, 6_880_000_000, 11_060_000_000, 12_290_000_000])[env_index]
    cost = (rate_nanos * present / HOUR_S).round().astype(np.int64)
    project_index = (row_device * 7 + second * 3 + (row_hour // 24) % 5) % len(PROJECTS)
    unallocated = (rng.random(n) < 0.05) & ~second
    # strings made by Polars (np.char is a Python loop per element: 48 s of 2 M rows)
    workload_key = pl.select(
        pl.when(pl.lit(unallocated))
        .then(pl.lit(""))
        .otherwise(pl.format("k8s:job-{}", pl.lit(project_index)))
        .alias("workload_key")
    ).to_series()
    frame = pl.DataFrame(
        {
            "source": "bench",
            "device_id": pl.select(pl.format("GPU-{}", pl.lit(row_device))).to_series(),
            "workload_key": workload_key,
            "environment": by_env(ENVIRONMENTS),
            "provider": by_env([None, *ENVIRONMENTS[1:]]),
            "region": by_env(["dc1", "region-1", "region-1", "region-1"]),
            "node": pl.select(pl.format("node-{}", pl.lit(row_device // 8))).to_series(),
            "gpu_model": by_env(MODELS),
            "gpu_fraction": 1.0,
            "project": pl.Series(PROJECTS).gather(project_index).set(pl.Series(unallocated), None),
            "team": pl.Series(TEAMS).gather(project_index % len(TEAMS)).set(pl.Series(unallocated), None),
            "default_metric": by_env(["sm_active", "gpu_util", "gpu_util", "gpu_util"]),
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
            "cost_nanos": cost,
            "idle_cost_nanos": (cost * (idle / present)).round().astype(np.int64),
            "currency": "USD",
            "rate_source": by_env(["tco:dc1", *["rate_card:bench"] * 3]),
            "hour_index": row_hour,
            "day_index": row_hour // 24,
        }
    )
    # Columns the bench leaves at their model defaults (0 seconds, not estimated).
    for column in LedgerHour.__table__.columns:
        if column.name in ("id", "cost", "idle_cost"):  # the money is in cost_nanos, idle_cost_nanos
            continue
        if column.name not in frame.columns and not column.nullable:
            default = column.default.arg if column.default is not None else 0.0
            frame = frame.with_columns(pl.lit(default).alias(column.name))
    hour_start = pl.from_epoch(pl.col("hour_index") * HOUR_S, time_unit="s").dt.replace_time_zone("UTC")
    return frame.with_columns(
        hour_start.alias("hour_start"),
        ((hour_start.dt.year() - 1970) * 12 + hour_start.dt.month() - 1).cast(pl.Int64).alias("month_index"),
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
    try:
        engine = make_engine(url)
        migrate(engine)
        end_day = dt.datetime.now(dt.UTC).date()
        start = dt.datetime.combine(end_day - dt.timedelta(days=args.days), dt.time(), tzinfo=dt.UTC)
        end = start + dt.timedelta(days=args.days)
        first_day = int(start.timestamp()) // (24 * HOUR_S)
        t0 = time.perf_counter()
        # As the ingest writes (devices, COPY of the rows, every rollup, the version), a week a
        # transaction: bench/dashboard_scale.py's loader.
        from dashboard_scale import load_fleet

        timing = load_fleet(engine, args.gpus, first_day, args.days, chunk_days=7)
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
        rollup_s = timing["rebuild_days"]
        print(
            f"loaded {counts['ledger_hour']:,} ledger rows ({args.gpus * args.days * 24:,} device-hours) "
            f"by COPY in {timing['replace_hours (COPY)']:.1f} s; rollups in {rollup_s:.1f} s "
            f"({rollup_s / args.days * 1000:.0f} ms a day, of which group rollups {group_ms:.0f} ms): "
            f"ledger_day {counts['ledger_day']:,}, ledger_group_hour {counts['ledger_group_hour']:,}, "
            f"ledger_group_day {counts['ledger_group_day']:,} rows; total {time.perf_counter() - t0:.1f} s"
        )
        engine.dispose()
        measure_questions(url, start, end, args.window_days, args.mid_day_hours, args.repeat, args.compare)
    finally:
        if created is not None:
            admin = make_engine(args.admin_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{created}" WITH (FORCE)'))
            admin.dispose()


def measure_questions(
    url: str,
    start: dt.datetime,
    end: dt.datetime,
    window_days: int,
    mid_day_hours: int,
    repeat: int,
    compare: bool,
    only: set[str] | None = None,
) -> None:
    """Time the dashboard questions over ledger ``[start, end)`` of database ``url`` through a
    ``serve`` process (and, with ``compare``, a device-level one, alternately); ``only``: the
    questions' keys (whole, midday, monthly, effective) to time, default all."""
    servers: list[subprocess.Popen] = []
    try:
        server, grouped = start_server(url, device_level=False)
        servers.append(server)
        targets = {"group rollups": grouped}
        if compare:
            server, device = start_server(url, device_level=True)
            servers.append(server)
            targets["device level"] = device
        load1 = os.getloadavg()[0]
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, load average {load1:.1f} at start; "
            f"PostgreSQL on 127.0.0.1; data {start.date()} – {end.date()}"
        )
        recent = end - dt.timedelta(days=window_days)
        shift = dt.timedelta(hours=mid_day_hours)
        questions = {
            f"cost(groupBy:[PROJECT]), {window_days} whole days": (
                "whole",
                COST_BY_PROJECT,
                window_of(recent, end),
            ),
            f"same, window cut mid-day (-{mid_day_hours} h)": (
                "midday",
                COST_BY_PROJECT,
                window_of(recent - shift, end - shift),
            ),
            f"monthly cost by project, {(end - start).days} days": (
                "monthly",
                MONTHLY_COST_BY_PROJECT,
                window_of(start, end),
            ),
            f"effectiveCost, {window_days} whole days": ("effective", EFFECTIVE_COST, window_of(recent, end)),
        }
        for name, (key, query, w) in questions.items():
            if only is not None and key not in only:
                continue
            answers = {label: answer_rows(post(target, query, {"w": w})) for label, target in targets.items()}
            for _ in range(2):
                for target in targets.values():
                    answer_rows(post(target, query, {"w": w}))
            if compare:
                same = rounded(answers["group rollups"]) == rounded(answers["device level"])
                assert same, f"{name}: the two paths differ"
            times: dict[str, list[float]] = {label: [] for label in targets}
            load_before = os.getloadavg()[0]
            for _ in range(repeat):
                for label, target in targets.items():  # interleaved: both see the same load
                    t = time.perf_counter()
                    answer_rows(post(target, query, {"w": w}))
                    times[label].append((time.perf_counter() - t) * 1000)
            line = f"{name}: {len(answers['group rollups'])} rows; " + "; ".join(
                f"{label} {stats(ts)}" for label, ts in times.items()
            )
            if compare:
                ratio = statistics.median(times["device level"]) / statistics.median(times["group rollups"])
                line += f"; ratio {ratio:.1f}×"
            line += f"; load {load_before:.1f}–{os.getloadavg()[0]:.1f}"
            print(line, flush=True)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        for server in servers:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()
