"""Issue 13 (b) as an export: usage(HOUR, DEVICE) through GET /export (Parquet, Arrow), in process
(rows and columns) and through GraphQL, on PostgreSQL, interleaved.

    .venv/bin/python bench/export_rows.py [--gpus 200] [--days 30] [--repeat 5] [--only parquet,arrow]

Loads gpus × days × 24 device-hours of ledger rows into a throwaway database with
``graphql_latency``'s loader (COPY, one in five device-hours split between two workloads, monthly
partitions and rollups as an ingest leaves them), starts ``gpu-ledger serve`` on it as a separate
process (anonymous reads on loopback, max_result_rows raised so GraphQL answers unpaged, the answer
cache off) and times, round-robin so that machine load hits every variant alike, the median of
--repeat runs of:

* ``analytics.usage`` in this process (the GraphQL resolver's rows, without GraphQL);
* ``columnar.usage_frame`` in this process (the export's columns, without HTTP or a file);
* ``GET /export/usage.parquet`` and ``GET /export/usage.arrow`` (whole body received);
* ``POST /graphql`` ``usage(granularity: HOUR, groupBy: [DEVICE])`` (whole body received, JSON parsed).

Every variant's answer is checked to have the same number of rows first. ``--only`` picks variants
(rows, columns, parquet, arrow, graphql) for sizes where the slow ones would take minutes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import polars as pl
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))

from graphql_latency import HOUR_S, free_port, ledger_rows, load, wait_ready  # noqa: E402

from service.analytics import columnar, usage  # noqa: E402
from service.analytics.access import ALL  # noqa: E402
from service.analytics.dims import Dimension, Granularity  # noqa: E402
from service.analytics.query import LedgerQuery  # noqa: E402
from service.analytics.window import check_window  # noqa: E402
from service.db import make_engine, migrate  # noqa: E402
from service.ledger.partitions import ensure_months  # noqa: E402
from service.ledger.store import rebuild_days  # noqa: E402

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
GRAPHQL = """query($w: TimeWindow!) { usage(window: $w, granularity: HOUR, groupBy: [DEVICE]) {
    periodStart device gpuHours effectiveGpuHours utilizationPct idleGpuHours energyKwh coveragePct
    metric } }"""


def start_server(url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = dict(
        os.environ,
        GPU_LEDGER_DATABASE_URL=url,
        GPU_LEDGER_LOG_LEVEL="warning",
        GPU_LEDGER_AUTH__ANONYMOUS_READ="true",  # a throwaway database on loopback
        GPU_LEDGER_MAX_RESULT_ROWS="100000000",  # GraphQL unpaged, to compare the whole answer
        GPU_LEDGER_LIMITS__REQUEST_TIMEOUT_S="600",
        GPU_LEDGER_LIMITS__RATE_PER_MINUTE="0",
        GPU_LEDGER_ANSWER_CACHE__MAX_B="0",  # every request computed
    )
    gpu_ledger = str(Path(sys.executable).parent / "gpu-ledger")
    server = subprocess.Popen(
        [gpu_ledger, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    wait_ready(base)
    return server, base


def fetch(request: urllib.request.Request | str) -> bytes:
    with urllib.request.urlopen(request, timeout=600) as response:
        body: bytes = response.read()
        return body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=200)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default="rows,columns,parquet,arrow,graphql", help="variants to time")
    args = parser.parse_args()
    only = set(args.only.split(","))
    admin = make_engine(ADMIN, isolation_level="AUTOCOMMIT")
    name = f"bench_export_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    engine = make_engine(url)
    server = None
    try:
        start = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
        end = start + dt.timedelta(days=args.days)
        first_hour = int(start.timestamp()) // HOUR_S
        migrate(engine)
        with engine.begin() as conn:
            ensure_months(conn, first_hour, first_hour + args.days * 24 - 1)
        load(url, ledger_rows(args.gpus, first_hour, args.days * 24))
        for day in range(first_hour // 24, first_hour // 24 + args.days):
            with engine.begin() as conn:
                rebuild_days(conn, day, day)
        with engine.begin() as conn:
            conn.execute(text("ANALYZE"))
        server, base = start_server(url)
        window = check_window(start, end, max_days=400)
        q = LedgerQuery(window, Granularity.HOUR, (Dimension.DEVICE,), access=ALL)
        params = urllib.parse.urlencode(
            {"start": start.isoformat(), "end": end.isoformat(), "granularity": "HOUR", "groupBy": "DEVICE"}
        )
        body = json.dumps(
            {"query": GRAPHQL, "variables": {"w": {"start": start.isoformat(), "end": end.isoformat()}}}
        )

        def in_process(call: Callable[..., object]) -> Callable[[], int]:
            def run() -> int:
                with engine.connect() as conn:
                    return len(call(conn, q))  # type: ignore[arg-type]

            return run

        def export(fmt: str) -> Callable[[], int]:
            def run() -> int:
                data = fetch(f"{base}/export/usage.{fmt}?{params}")
                sizes[f"export {fmt}"] = len(data)
                return len(data) and -1

            return run

        def graphql() -> int:
            request = urllib.request.Request(
                f"{base}/graphql", data=body.encode(), headers={"Content-Type": "application/json"}
            )
            data = fetch(request)
            sizes["graphql"] = len(data)
            answer = json.loads(data)
            assert "errors" not in answer, str(answer)[:500]
            return len(answer["data"]["usage"])

        sizes: dict[str, int] = {}
        every: dict[str, tuple[str, Callable[[], int]]] = {
            "rows": ("analytics.usage (rows, in process)", in_process(usage.usage)),
            "columns": ("columnar.usage_frame (columns, in process)", in_process(columnar.usage_frame)),
            "parquet": ("GET /export/usage.parquet", export("parquet")),
            "arrow": ("GET /export/usage.arrow", export("arrow")),
            "graphql": ("POST /graphql usage(HOUR, DEVICE)", graphql),
        }
        variants = dict(every[key] for key in every if key in only)
        # Warm-up and a check that every variant answers the same rows.
        rows = {label: run() for label, run in variants.items()}
        arrow = pl.read_ipc_stream(io.BytesIO(fetch(f"{base}/export/usage.arrow?{params}")))
        parquet = pl.read_parquet(io.BytesIO(fetch(f"{base}/export/usage.parquet?{params}")))
        expected = arrow.height
        assert parquet.height == expected and all(n in (expected, -1) for n in rows.values()), rows
        times: dict[str, list[float]] = {label: [] for label in variants}
        for _ in range(args.repeat):
            for label, run in variants.items():
                t0 = time.perf_counter()
                run()
                times[label].append(time.perf_counter() - t0)
        print(
            f"{args.gpus} GPUs × {args.days} days on PostgreSQL, usage(HOUR, DEVICE) = {expected:,} rows; "
            f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the "
            "end; "
            f"median of {args.repeat}, interleaved"
        )
        graphql_times = times.get("POST /graphql usage(HOUR, DEVICE)")
        graphql_ms = statistics.median(graphql_times) * 1000 if graphql_times else None
        for label, samples in times.items():
            ms = statistics.median(samples) * 1000
            size = f", {sizes[key] / 1e6:.1f} MB" if (key := _size_key(label)) in sizes else ""
            ratio = f" (GraphQL ÷ this: {graphql_ms / ms:.1f}×)" if graphql_ms else ""
            print(f"  {label}: {ms:,.0f} ms{size}{ratio}")
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _size_key(label: str) -> str:
    if "parquet" in label:
        return "export parquet"
    if "arrow" in label:
        return "export arrow"
    return "graphql" if "graphql" in label else ""


if __name__ == "__main__":
    main()
