"""Issue 13 (b)/(c) in process: analytics.usage(HOUR, DEVICE) and idle_waste(DEVICE) with and without
the longest idle streak, on PostgreSQL, timed without HTTP or GraphQL.

    .venv/bin/python bench/analytics_rows.py [--gpus 200] [--days 30] [--repeat 5]

Loads gpus × days × 24 device-hours of ledger rows into a throwaway database with
``graphql_latency``'s loader (COPY, one in five device-hours split between two workloads), builds the
daily rollup, and prints the median of --repeat runs of each call. Run it on two commits to compare.
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import statistics
import sys
import time
import uuid
from pathlib import Path

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))

from graphql_latency import HOUR_S, ledger_rows, load  # noqa: E402

from service.analytics import idle, usage  # noqa: E402
from service.analytics.access import ALL  # noqa: E402
from service.analytics.dims import Dimension, Granularity  # noqa: E402
from service.analytics.query import LedgerQuery  # noqa: E402
from service.analytics.window import check_window  # noqa: E402
from service.db import make_engine, migrate  # noqa: E402
from service.ledger.store import rebuild_days  # noqa: E402

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=200)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    admin = make_engine(ADMIN, isolation_level="AUTOCOMMIT")
    name = f"bench_rows_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    engine = make_engine(url)
    try:
        start = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
        first_hour = int(start.timestamp()) // HOUR_S
        migrate(engine)
        load(url, ledger_rows(args.gpus, first_hour, args.days * 24))
        with engine.begin() as conn:
            rebuild_days(conn, first_hour // 24, first_hour // 24 + args.days - 1)
            conn.execute(text("ANALYZE"))
        window = check_window(start, start + dt.timedelta(days=args.days), max_days=400)
        hourly = LedgerQuery(window, Granularity.HOUR, (Dimension.DEVICE,), access=ALL)
        total = LedgerQuery(window, Granularity.TOTAL, (Dimension.DEVICE,), access=ALL)

        def timed(label: str, call: object) -> None:
            times, rows = [], 0
            for _ in range(args.repeat):
                with engine.connect() as conn:
                    t0 = time.perf_counter()
                    rows = len(call(conn))  # type: ignore[operator]
                    times.append(time.perf_counter() - t0)
            print(f"{label}: median {statistics.median(times) * 1000:.0f} ms ({rows} rows)", flush=True)

        print(f"{args.gpus} GPUs × {args.days} days, PostgreSQL")
        timed("usage(HOUR, DEVICE)", lambda c: usage.usage(c, hourly))
        timed("idle_waste(DEVICE) with the streak", lambda c: idle.idle_waste(c, total))
        if "streak" in inspect.signature(idle.idle_waste).parameters:
            timed("idle_waste(DEVICE) without it", lambda c: idle.idle_waste(c, total, streak=False))
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
