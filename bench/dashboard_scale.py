"""Benchmark: dashboard questions over a big synthetic fleet kept in a database between runs.

    .venv/bin/python bench/dashboard_scale.py load --database gl_dash_10k --gpus 10000 --days 30
    .venv/bin/python bench/dashboard_scale.py load --database gl_dash_year --days 365 --hour-retention-days 35
    .venv/bin/python bench/dashboard_scale.py load --database D --days 365 --hour-retention-days 35 --resume
    .venv/bin/python bench/dashboard_scale.py measure --database gl_dash_10k --repeat 10 [--compare]
    .venv/bin/python bench/dashboard_scale.py size --database gl_dash_10k
    .venv/bin/python bench/dashboard_scale.py drop --database gl_dash_10k

``load`` creates the PostgreSQL database (127.0.0.1:5432), migrates it and writes the fleet the
way the metrics ingest writes a window (``service.ledger.ingest._ingest_chunk``), --chunk-days
days per transaction: ``store.upsert_devices`` (the devices and their first/last seen),
``store.replace_hours`` (the ledger rows, COPY), ``store.rebuild_days`` over the chunk's days
(``ledger_day``, ``ledger_group_hour``, ``ledger_group_day``, the day segments: one statement
per table over the whole range), ``ledger_version.bump``; then ``ANALYZE ledger_hour`` as a
backfill does. The rows come from ``graphql_latency.ledger_frame`` (column-wise: ~1.2 rows per
device-hour, one in five device-hours split between two workloads), the last ``--days`` whole
UTC days before today. It prints the time of each step and, per table, the statements' time.
``--resume`` continues a load that was stopped (each transaction is a whole chunk, so a stopped
load leaves whole chunks behind): the same first day, from the day after the last one
``ledger_group_day`` holds (:func:`resume_point`), so a long load can be stopped and restarted
(on newer code, say) without writing its days again.

``--hour-retention-days N`` keeps the disk bounded the way a deployment keeps a year: after each
transaction, the months of ``ledger_hour`` wholly before the last N loaded days are pruned
(``retention.prune``, as ``gpu-ledger prune`` does: partitions dropped, ``ledger_day`` and the group
rollups kept). Before a month goes, two of its days are spot-checked (per project, the raw rows'
cost equals ``ledger_day``'s and ``ledger_group_day``'s) and a week cut mid-day (from day 3 + 7 h to
day 10 + 7 h) equals ``ledger_group_hour``; that week's raw answer is kept in the database
(``bench_raw_check.window_cost``) for ``measure``.

``measure`` starts ``gpu-ledger serve`` on the kept database (answer cache off) and times the
dashboard questions of ``graphql_latency`` (``--compare``: against the device-level path too),
printing the load average with each figure; then, over pruned months, the kept mid-day weeks by
PROJECT (timed, and equal to their raw rows' sums or it fails) and one by NODE (what the API says
of device-level hours it no longer holds). ``size`` prints the tables' sizes; ``drop`` drops it.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import os
import re
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
from sqlalchemy import Engine, event, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from graphql_latency import (  # noqa: E402  (bench/ is not a package)
    COST_BY_PROJECT,
    ENVIRONMENTS,
    HOUR_S,
    MODELS,
    MONTHLY_COST_BY_PROJECT,
    answer_rows,
    ledger_frame,
    measure_questions,
    post,
    start_server,
    stats,
    window_of,
)

from connectors.base import DeviceInfo  # noqa: E402
from service.db import make_engine, migrate  # noqa: E402
from service.ledger import partitions, retention, store  # noqa: E402
from service.ledger import version as ledger_version  # noqa: E402
from service.timeutil import EPOCH, month_index, month_start  # noqa: E402

ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
SOURCE = "bench"
DAY_S = 24 * HOUR_S
#: The table a statement writes (INSERT INTO, DELETE FROM, ANALYZE) or first reads (SELECT … FROM).
TARGET = re.compile(r'(?:INTO|FROM|ANALYZE|TABLE)\s+"?(\w+)', re.IGNORECASE)
TABLES = (
    "ledger_hour",
    "ledger_day",
    "ledger_group_hour",
    "ledger_group_day",
    "ledger_hour_segment",
    "device",
    "ledger_version",
)


def devices(gpus: int) -> list[DeviceInfo]:
    """The devices of ``ledger_frame``'s rows, with the same attributes (device i: environment
    i % 4, node i // 8, model i % 4)."""
    out = []
    for i in range(gpus):
        env = str(ENVIRONMENTS[i % 4])
        out.append(
            DeviceInfo(
                device_id=f"GPU-{i}",
                environment=env,  # type: ignore[arg-type]
                provider=None if env == "onprem" else env,
                region="dc1" if env == "onprem" else "region-1",
                node=f"node-{i // 8}",
                gpu_model=str(MODELS[i % 4]),
                gpu_fraction=1.0,
            )
        )
    return out


def seen_of(rows: pl.DataFrame) -> pl.DataFrame:
    """What the ingest passes to ``upsert_devices``: each device's first and last sample (here the
    first and last second of its hours) and its metrics."""
    return rows.group_by("device_id").agg(
        (pl.col("hour_index").min() * HOUR_S * 1000).alias("first_ms"),
        ((pl.col("hour_index").max() + 1) * HOUR_S * 1000 - 1).alias("last_ms"),
        pl.col("default_metric").unique().sort().str.join(",").alias("metrics"),
    )


class StatementTimes:
    """Wall time of the engine's statements by the table they write (or read, for COPY … TO)."""

    def __init__(self, engine: Engine) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)

    def _before(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        conn.info["_t0"] = time.perf_counter()

    def _after(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        verb = statement.split(None, 1)[0].upper() if statement.strip() else "?"
        target = TARGET.search(statement)
        table = target.group(1) if target else ""
        self.seconds[f"{verb} {table}".strip()] += time.perf_counter() - conn.info.pop("_t0")


#: Raw answers kept in the database for ``measure`` to check the served ones against after the
#: hours they came from were pruned: per window, project and currency, the sum of ``ledger_hour.cost``.
RAW_CHECK = "bench_raw_check.window_cost"


def project_costs(conn: Any, table: str, column: str, lo: int, hi: int) -> dict[tuple, Any]:
    """(project, currency) → sum(cost) of ``table``'s rows with ``lo <= column < hi``."""
    where = f"{column} >= :lo AND {column} < :hi"
    bounds: dict[str, Any] = {"lo": lo, "hi": hi}
    if table == "ledger_hour":  # the partition key too: only the hours' months are read (a day
        # by hour_index alone took ~90 s at 20 M rows, load 10, the parent has no statistics yet)
        where += " AND hour_start >= :start AND hour_start < :end"
        bounds |= {"start": EPOCH + dt.timedelta(hours=lo), "end": EPOCH + dt.timedelta(hours=hi)}
    sql = f"SELECT project, currency, sum(cost) FROM {table} WHERE {where} GROUP BY 1, 2"
    return {(p, c): v for p, c, v in conn.execute(text(sql), bounds).all()}


def spot_check(conn: Any, days: list[int], mid_day_hours: int) -> None:
    """Before their hours go: each of ``days`` summed by project from the raw rows equals
    ``ledger_day`` and ``ledger_group_day``; and a window from the first day's ``mid_day_hours``
    to the last day's, summed from the raw rows, equals ``ledger_group_hour`` and is kept in
    :data:`RAW_CHECK` for ``measure``. Raises on any difference."""
    for day in days:
        raw = project_costs(conn, "ledger_hour", "hour_index", day * 24, day * 24 + 24)
        for table in ("ledger_day", "ledger_group_day"):
            rolled = project_costs(conn, table, "day_index", day, day + 1)
            assert rolled == raw, f"day {day}: {table} differs from ledger_hour: {rolled} != {raw}"
        print(
            f"    spot check day {day}: {len(raw)} projects, ledger_hour = ledger_day = ledger_group_day "
            f"(total {sum(raw.values())})",
            flush=True,
        )
    lo, hi = days[0] * 24 + mid_day_hours, days[-1] * 24 + mid_day_hours
    raw = project_costs(conn, "ledger_hour", "hour_index", lo, hi)
    rolled = project_costs(conn, "ledger_group_hour", "hour_index", lo, hi)
    assert rolled == raw, f"hours {lo}–{hi}: ledger_group_hour differs from ledger_hour"
    conn.execute(text("CREATE SCHEMA IF NOT EXISTS bench_raw_check"))
    conn.execute(
        text(
            f"CREATE TABLE IF NOT EXISTS {RAW_CHECK} (start_hour int, end_hour int, project text, "
            "currency text, cost numeric)"
        )
    )
    for (project, currency), cost in raw.items():
        conn.execute(
            text(f"INSERT INTO {RAW_CHECK} VALUES (:lo, :hi, :p, :c, :v)"),
            {"lo": lo, "hi": hi, "p": project, "c": currency, "v": cost},
        )
    print(f"    spot check hours {lo}–{hi} (cut mid-day): ledger_hour = ledger_group_hour, kept", flush=True)


def prune_past_retention(
    engine: Engine, first_day: int, last_day: int, retention_days: int, mid_day_hours: int
) -> list[str]:
    """What an operator's ``gpu-ledger prune`` keeps ``retention_days`` of hours with: once the
    loaded days end at ``last_day``, drop the months wholly before the month holding day
    ``last_day + 1 - retention_days`` (so at least ``retention_days`` whole days of hours stay),
    after spot-checking two days of each month against its rollups. The partitions dropped."""
    boundary = retention.boundary_keeping(retention_days, EPOCH + dt.timedelta(days=last_day + 1))
    with engine.begin() as conn:
        pruned = retention.pruned_before(conn)
        start = max(EPOCH + dt.timedelta(days=first_day), pruned or EPOCH)
        if boundary <= start:
            return []
        month = month_index(start)
        while month_start(month) < boundary:
            first = max(first_day, (month_start(month) - EPOCH).days)
            spot_check(conn, [first + 3, first + 10], mid_day_hours)
            month += 1
    with engine.begin() as conn:  # its own transaction, as the command runs
        return retention.prune(conn, boundary).partitions_dropped


def load_fleet(
    engine: Engine,
    gpus: int,
    first_day: int,
    days: int,
    chunk_days: int,
    hour_retention_days: int = 0,
    mid_day_hours: int = 7,
    start_offset: int = 0,
) -> dict[str, float]:
    """Write ``gpus`` devices × ``days`` days from ``first_day`` as the ingest writes them,
    ``chunk_days`` days per transaction, from day ``first_day + start_offset`` on (a resumed load);
    with ``hour_retention_days``, prune the hours' months past it as the loading goes
    (:func:`prune_past_retention`); seconds by step."""
    fleet = devices(gpus)
    ids = [d.device_id for d in fleet]
    timing: dict[str, float] = collections.defaultdict(float)
    for offset in range(start_offset, days, chunk_days):
        n = min(chunk_days, days - offset)
        lo_day = first_day + offset
        t = time.perf_counter()
        rows = ledger_frame(gpus, lo_day * 24, n * 24, seed=11 + offset)
        seen = seen_of(rows)
        timing["generate rows"] += time.perf_counter() - t
        with engine.begin() as conn:
            t = time.perf_counter()
            store.upsert_devices(conn, SOURCE, fleet, seen)
            timing["upsert_devices"] += time.perf_counter() - t
            t = time.perf_counter()
            store.replace_hours(conn, SOURCE, lo_day * 24, (lo_day + n) * 24, ids, rows)
            timing["replace_hours (COPY)"] += time.perf_counter() - t
            t = time.perf_counter()
            store.rebuild_days(conn, lo_day, lo_day + n - 1)
            timing["rebuild_days"] += time.perf_counter() - t
            ledger_version.bump(conn)
            t = time.perf_counter()
        timing["commit"] += time.perf_counter() - t
        if hour_retention_days:
            t = time.perf_counter()
            dropped = prune_past_retention(
                engine, first_day, lo_day + n - 1, hour_retention_days, mid_day_hours
            )
            timing["spot check + prune"] += time.perf_counter() - t
            if dropped:
                print(f"    pruned {', '.join(dropped)}", flush=True)
        print(
            f"  days {offset + n}/{days}: {rows.height:,} rows; "
            + ", ".join(f"{k} {v:.0f} s" for k, v in timing.items())
            + f"; load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        del rows
    t = time.perf_counter()
    with engine.begin() as conn:
        partitions.analyze_parent(conn)  # as a backfill ends (docs/rollups.md)
        conn.exec_driver_sql("ANALYZE")
    timing["analyze"] = time.perf_counter() - t
    return timing


COST_BY_NODE = (
    """query($w: TimeWindow!){ cost(window:$w, groupBy:[NODE]) { node cost { amount currency } } }"""
)


def measure_pruned(url: str, repeat: int) -> None:
    """Windows cut mid-day inside pruned months (the ones :func:`spot_check` kept the raw answers
    of): ``cost(groupBy:[PROJECT])`` timed and held to the raw rows' sums per project, exactly;
    then the same window by NODE, a device-level dimension the group rollups do not keep, to show
    what the API says about hours it no longer holds."""
    engine = make_engine(url)
    with engine.connect() as conn:
        if conn.execute(text("SELECT to_regclass(:t)"), {"t": RAW_CHECK}).scalar() is None:
            print("no pruned windows were kept (load without --hour-retention-days)")
            return
        raw: dict[tuple[int, int], dict[tuple, Decimal]] = collections.defaultdict(dict)
        for lo, hi, project, currency, cost in conn.execute(text(f"SELECT * FROM {RAW_CHECK}")).all():
            raw[(lo, hi)][(project, currency)] = cost
        boundary = retention.pruned_before(conn)
    engine.dispose()
    # one client asks ~22 times per window: over the default rate limit (burst 100) by the fifth
    # window of a year's pruned months (429); a throwaway server on loopback times queries, not that
    os.environ.setdefault("GPU_LEDGER_LIMITS__RATE_PER_MINUTE", "0")
    server, target = start_server(url, device_level=False)
    try:
        print(f"ledger_hour pruned before {boundary:%Y-%m-%d}; windows cut mid-day in pruned months:")
        for (lo, hi), expected in sorted(raw.items()):
            w = window_of(EPOCH + dt.timedelta(hours=lo), EPOCH + dt.timedelta(hours=hi))
            rows = answer_rows(post(target, COST_BY_PROJECT, {"w": w}))
            got = {(r["project"], r["cost"]["currency"]): Decimal(r["cost"]["amount"]) for r in rows}
            assert got == expected, f"{w}: the served answer differs from the raw rows: {got} != {expected}"
            times = []
            for _ in range(2 + repeat):
                t = time.perf_counter()
                answer_rows(post(target, COST_BY_PROJECT, {"w": w}))
                times.append((time.perf_counter() - t) * 1000)
            print(
                f"  cost(groupBy:[PROJECT]) {w['start']} – {w['end']}: {len(rows)} rows, equal to the raw "
                f"rows summed before the prune (total {sum(got.values())}); {stats(times[2:])}; "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        lo, hi = min(raw)
        w = window_of(EPOCH + dt.timedelta(hours=lo), EPOCH + dt.timedelta(hours=hi))
        answer = post(target, COST_BY_NODE, {"w": w})
        if answer.get("errors"):
            print(
                f"  cost(groupBy:[NODE]) same window: error {answer['errors'][0].get('extensions')}: "
                f"{answer['errors'][0]['message']}"
            )
        else:
            total = sum(Decimal(r["cost"]["amount"]) for r in answer_rows(answer))
            print(
                f"  cost(groupBy:[NODE]) same window: answered, total {total} vs the raw rows' "
                f"{sum(raw[(lo, hi)].values())}"
            )
    finally:
        server.terminate()
        server.wait(10)


def resume_point(engine: Engine) -> tuple[int, int] | None:
    """(first day, days already loaded) of a stopped load, from the days ``ledger_group_day``
    holds (kept past the hours' retention, written in each chunk's transaction); None if empty."""
    with engine.connect() as conn:
        lo, hi = conn.execute(text("select min(day_index), max(day_index) from ledger_group_day")).one()
    return None if lo is None else (int(lo), int(hi) - int(lo) + 1)


def monthly_from_ledger_day(conn: Any, first_day: int, last_day: int) -> dict[tuple, Decimal]:
    """(month start, project, currency) → cost of days ``[first_day, last_day]`` summed from
    ``ledger_day``: the device-level rollup, kept past the hours' retention and rebuilt from the
    hours apart from the group rollups the served answer reads (an independent sum)."""
    rows = conn.execute(
        text(
            "SELECT month_index, project, currency, sum(cost) FROM ledger_day "
            "WHERE day_index >= :lo AND day_index <= :hi GROUP BY 1, 2, 3"
        ),
        {"lo": first_day, "hi": last_day},
    ).all()
    return {(month_start(int(m)), p, c): v for m, p, c, v in rows if v is not None}


def served_monthly(rows: list[dict[str, Any]]) -> dict[tuple, Decimal]:
    """The monthly answer's rows as :func:`monthly_from_ledger_day`'s keys."""
    return {
        (dt.datetime.fromisoformat(r["periodStart"]), r["project"], r["cost"]["currency"]): Decimal(
            r["cost"]["amount"]
        )
        for r in rows
    }


def check_monthly(url: str, first_day: int, last_day: int) -> None:
    """The served monthly cost by project over the whole loaded range equals ``ledger_day``'s sums
    (:func:`monthly_from_ledger_day`), exactly, or it fails."""
    engine = make_engine(url)
    with engine.connect() as conn:
        expected = monthly_from_ledger_day(conn, first_day, last_day)
    engine.dispose()
    server, target = start_server(url, device_level=False)
    try:
        w = window_of(EPOCH + dt.timedelta(days=first_day), EPOCH + dt.timedelta(days=last_day + 1))
        got = served_monthly(answer_rows(post(target, MONTHLY_COST_BY_PROJECT, {"w": w})))
    finally:
        server.terminate()
        server.wait(10)
    assert got == expected, f"monthly by project differs from ledger_day: {got} != {expected}"
    print(
        f"monthly cost by project {w['start']} – {w['end']}: {len(got)} rows, equal to ledger_day's "
        f"sums ({len({k[0] for k in got})} months, total {sum(got.values())})",
        flush=True,
    )


def url_of(database: str) -> str:
    return ADMIN_URL.rsplit("/", 1)[0] + f"/{database}"


def counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t: int(conn.execute(text(f"select count(*) from {t}")).scalar() or 0) for t in TABLES}


def sizes(engine: Engine) -> dict[str, str]:
    """Each table's size with its indexes (a partitioned table: the sum of its partitions)."""
    sql = """select coalesce(p.relname, c.relname) as t, sum(pg_total_relation_size(c.oid))
             from pg_class c left join pg_inherits i on i.inhrelid = c.oid
             left join pg_class p on p.oid = i.inhparent
             where c.relkind in ('r', 'm') and coalesce(p.relname, c.relname) = any(:tables)
             group by 1"""
    with engine.connect() as conn:
        found = dict(conn.execute(text(sql), {"tables": list(TABLES)}).all())
        total = conn.execute(text("select pg_database_size(current_database())")).scalar()
    out = {t: f"{int(found.get(t, 0)) / 2**20:,.0f} MB" for t in TABLES}
    out["database"] = f"{int(total or 0) / 2**20:,.0f} MB"
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=["load", "measure", "size", "drop"])
    parser.add_argument("--database", required=True, help="the kept database's name")
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--chunk-days", type=int, default=7, help="days per load transaction")
    parser.add_argument(
        "--hour-retention-days",
        type=int,
        default=0,
        help="load: keep at least this many days of ledger_hour, pruning whole months past it (0: keep all)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="load: continue a stopped load of this database"
    )
    parser.add_argument("--window-days", type=int, default=30)
    parser.add_argument("--mid-day-hours", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--compare", action="store_true", help="also time the device-level path")
    parser.add_argument(
        "--questions",
        default="all",
        help="comma list of: whole, midday, monthly, effective, pruned (default all)",
    )
    args = parser.parse_args()
    url = url_of(args.database)
    admin = make_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    if args.action == "drop":
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)'))
        print(f"dropped {args.database}")
        return
    if args.action == "load":
        if not args.resume:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{args.database}"'))
        engine = make_engine(url)
        migrate(engine)
        today = dt.datetime.now(dt.UTC).date()
        first_day = (today - dt.date(1970, 1, 1)).days - args.days
        done = resume_point(engine) if args.resume else None
        if done is not None:
            first_day = done[0]
        start_offset = 0 if done is None else done[1]
        print(
            f"loading {args.gpus:,} GPUs × {args.days} days ({first_day} … {first_day + args.days - 1}), "
            f"{args.chunk_days} days a transaction"
            + (f", resuming after {start_offset} days" if start_offset else "")
            + f"; load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        statements = StatementTimes(engine)
        t0 = time.perf_counter()
        timing = load_fleet(
            engine,
            args.gpus,
            first_day,
            args.days,
            args.chunk_days,
            args.hour_retention_days,
            args.mid_day_hours,
            start_offset,
        )
        total = time.perf_counter() - t0
        print(f"loaded in {total:.0f} s: " + ", ".join(f"{k} {v:.0f} s" for k, v in timing.items()))
        slow = sorted(statements.seconds.items(), key=lambda kv: -kv[1])[:12]
        print("statements: " + ", ".join(f"{k} {v:.1f} s" for k, v in slow))
    engine = make_engine(url)
    print("rows: " + ", ".join(f"{t} {n:,}" for t, n in counts(engine).items()))
    print("size: " + ", ".join(f"{t} {s}" for t, s in sizes(engine).items()), flush=True)
    if args.action == "measure":
        with engine.connect() as conn:
            lo, hi = conn.execute(text("select min(day_index), max(day_index) from ledger_group_day")).one()
        engine.dispose()
        start = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(days=int(lo))
        end = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(days=int(hi) + 1)
        measure_questions(
            url,
            start,
            end,
            window_days=args.window_days,
            mid_day_hours=args.mid_day_hours,
            repeat=args.repeat,
            compare=args.compare,
            only=None if args.questions == "all" else set(args.questions.split(",")),
        )
        if args.questions == "all" or "monthly" in args.questions.split(","):
            check_monthly(url, int(lo), int(hi))
        if args.questions == "all" or "pruned" in args.questions.split(","):
            measure_pruned(url, args.repeat)


if __name__ == "__main__":
    main()
