"""Benchmark: issue 13 (b) through GraphQL pages — usage(granularity: HOUR, groupBy: [DEVICE]) read
page by page (first/after) over HTTP from a separate ``gpu-ledger serve`` process on PostgreSQL.

    .venv/bin/python bench/graphql_pages.py [--gpus 200] [--days 30] [--page-size 50000] [--repeat 3]

Loads the same ledger as bench/graphql_latency.py (its loader: gpus × days × 24 device-hours, ~1.2
rows per device-hour) into a throwaway database (or --database-url, then nothing is loaded unless
--load), starts the server, then reads the whole answer --repeat times after one warm-up, each
time following the last row's cursor until a page comes back short. Prints, per run: total time,
rows/s, and per-page p50/p99 of the first and of the last quarter of the pages (a page's cost
must not grow with its position in the answer). The client decodes with orjson when installed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from graphql_latency import HOUR_S, free_port, ledger_rows, load  # noqa: E402  (bench/ is not a package)

from service.db import make_engine, migrate  # noqa: E402
from service.ledger.store import rebuild_days  # noqa: E402

try:
    import orjson

    loads: Any = orjson.loads
except ImportError:  # pragma: no cover
    import json

    loads = json.loads

QUERY = """query($w: TimeWindow!, $n: Int, $a: String) {
  usage(window: $w, granularity: HOUR, groupBy: [DEVICE], first: $n, after: $a) {
    periodStart device utilizationPct cursor } }"""


def post(url: str, variables: dict[str, Any]) -> tuple[dict[str, Any], int]:
    import json as stdjson

    body = stdjson.dumps({"query": QUERY, "variables": variables}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        raw = response.read()
    return loads(raw), len(raw)


def read_all(url: str, window: dict[str, str], page_size: int) -> tuple[int, int, list[float]]:
    """(rows, bytes, per-page seconds) of one pass over the whole answer."""
    rows = size = 0
    after = None
    times: list[float] = []
    while True:
        t = time.perf_counter()
        answer, n_bytes = post(url, {"w": window, "n": page_size, "a": after})
        times.append(time.perf_counter() - t)
        assert not answer.get("errors"), answer["errors"]
        page = answer["data"]["usage"]
        rows += len(page)
        size += n_bytes
        if len(page) < page_size:
            return rows, size, times
        after = page[-1]["cursor"]


def quantiles(times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return f"p50 {statistics.median(ms):.0f} ms, p99 {p99:.0f} ms"


def create_database(admin_url: str) -> tuple[str, str]:
    name = f"gpu_ledger_bench_{uuid.uuid4().hex[:8]}"
    admin = make_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return name, admin_url.rsplit("/", 1)[0] + f"/{name}"


def fill(url: str, gpus: int, days: int, start: dt.datetime) -> None:
    engine = make_engine(url)
    migrate(engine)
    start_hour = int(start.timestamp()) // HOUR_S
    t0 = time.perf_counter()
    rows = ledger_rows(gpus, start_hour, days * 24)
    load(url, rows)
    with engine.begin() as conn:
        rebuild_days(conn, start_hour // 24, start_hour // 24 + days - 1)
        conn.execute(text("ANALYZE"))
    engine.dispose()
    took_s = time.perf_counter() - t0
    print(f"loaded {rows.height:,} ledger rows ({gpus * days * 24:,} device-hours) in {took_s:.1f} s")


def start_server(url: str, page_size: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = dict(os.environ, GPU_LEDGER_DATABASE_URL=url, GPU_LEDGER_LOG_LEVEL="warning")
    # Both caps: a build from before aggregate_page_size_max capped aggregate pages at page_size_max.
    env.setdefault("GPU_LEDGER_PAGE_SIZE_MAX", str(page_size))
    env.setdefault("GPU_LEDGER_AGGREGATE_PAGE_SIZE_MAX", str(page_size))
    env.setdefault("GPU_LEDGER_AUTH__ANONYMOUS_READ", "true")
    env.setdefault("GPU_LEDGER_ANSWER_CACHE__MAX_B", "0")  # every page computed, never a cached copy
    env.setdefault("GPU_LEDGER_LIMITS__RATE_PER_MINUTE", "0")
    env.setdefault("GPU_LEDGER_LIMITS__REQUEST_TIMEOUT_S", "120")
    binary = Path(sys.executable).parent / "gpu-ledger"
    command = [str(binary), "serve", "--port", str(port)]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(base + "/healthz", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    try:
        urllib.request.urlopen(base + "/readyz", timeout=5)
    except OSError as exc:  # e.g. an older build against a database migrated further: say so
        print(f"warning: /readyz: {exc}")
    return server, base


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=200)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--page-size", type=int, default=50000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--database-url", default=None, help="an already loaded database (kept)")
    parser.add_argument("--load", action="store_true", help="load --database-url first")
    parser.add_argument("--keep", action="store_true", help="keep the throwaway database; print its URL")
    parser.add_argument("--admin-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()

    end_day = dt.datetime.now(dt.UTC).date()
    start = dt.datetime.combine(end_day - dt.timedelta(days=args.days), dt.time(), tzinfo=dt.UTC)
    created = None
    url = args.database_url
    if url is None:
        created, url = create_database(args.admin_url)
    server = None
    try:
        if created is not None or args.load:
            fill(url, args.gpus, args.days, start)
        server, base = start_server(url, args.page_size)
        window = {"start": start.isoformat(), "end": (start + dt.timedelta(days=args.days)).isoformat()}
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
            f"window {window['start']} – {window['end']}; page size {args.page_size:,}"
        )
        read_all(base + "/graphql", window, args.page_size)  # warm-up
        for run in range(args.repeat):
            t = time.perf_counter()
            rows, size, times = read_all(base + "/graphql", window, args.page_size)
            total = time.perf_counter() - t
            quarter = max(1, len(times) // 4)
            print(
                f"run {run + 1}: {rows:,} rows in {len(times)} pages, {size / 1e6:.1f} MB, "
                f"total {total:.2f} s, {rows / total:,.0f} rows/s; first pages {quantiles(times[:quarter])}; "
                f"last pages {quantiles(times[-quarter:])}"
            )
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        if created is not None and not args.keep:
            admin = make_engine(args.admin_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{created}" WITH (FORCE)'))
            admin.dispose()
        elif created is not None:
            print(f"kept database: {url}")


if __name__ == "__main__":
    main()
