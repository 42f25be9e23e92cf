"""Issue 13's comparison: the same questions to Prometheus and to GPU Ledger, on the same data.

    .venv/bin/python bench/vs_prometheus.py --gpus 200 --days 30 [--step 60] [--repeat 5]
        [--workdir DIR] [--tree CHECKOUT] [--ingest-only] [--admin-url URL] [--database NAME]

1. Generates ``DCGM_FI_DEV_GPU_UTIL`` for ``--gpus`` × ``--days`` at ``--step`` s with
   bench/gen_dcgm_om.py (data from 2024-10-01T00:00Z) and backfills it with ``promtool tsdb
   create-blocks-from openmetrics --max-block-duration=240h``; both are kept in ``--workdir``
   (default ``/tmp/vs_prometheus-GxDxS``) and reused by the next run of the same size.
2. Starts ``prometheus`` on a free port (retention 10y, an empty config).
3. Creates a throwaway PostgreSQL database (dropped at the end; ``--database NAME``: that database,
   kept, and ingested into only while it holds no ledger rows — for profiling) and ingests the
   same data through the ``prometheus`` connector with ``gpu-ledger ingest`` (the real path, a
   separate process; its wall time, start-up included, gives samples/s). ``--tree`` runs the
   ingest from another checkout (``git worktree add /tmp/wt-old <commit>``) with this venv:
   before/after.
4. Starts ``gpu-ledger serve`` on that database (its connector disabled) and checks that the
   answers agree:
   * mean utilization per GPU over the window: ``usage(groupBy:[DEVICE]) { utilizationPct }`` =
     ``avg_over_time(X[30d])`` (each reading stands for one step, so the ledger's time-weighted
     mean is the samples' mean), to 1e-6 percentage points;
   * hourly means: ``usage(granularity:HOUR, groupBy:[DEVICE])`` = ``avg_over_time(X[3599999ms])``
     at each hour's last millisecond (Prometheus 2 includes both ends of a range, so ``[1h]`` at
     the hour would also take the next hour's first sample);
   * idle GPU-hours by the ledger's rule: the observed time of readings strictly below 5 %
     (each reading stands for one step) = ``count_over_time((X < 5)[D d:step] offset 1ms)`` ×
     step / 3600 (the anchor query (c) counts hours whose mean is below 5 %, another rule).
5. Times, interleaved, medians of ``--repeat`` (after one warm-up each): (a) ``usage(groupBy:
   [DEVICE])`` vs ``avg_over_time[Dd]``; (b) ``usage(granularity:HOUR, groupBy:[DEVICE])`` read
   through GraphQL pages (``first`` = the largest page allowed, then ``after`` = the last row's
   ``cursor``) and as ``GET /export/usage.arrow?compression=lz4`` (read whole by polars) vs
   ``query_range`` of ``avg_over_time[1h]``;
   (c) ``idleWaste(groupBy:[DEVICE])`` vs the ``count_over_time`` subquery. Every client time
   includes reading and decoding the answer (JSON, or Arrow IPC with Polars). The Prometheus
   queries are those three (issue 13's anchor queries), for a window of ``--days``. The ledger's
   first call of each question (during the checks, before the service can have cached that
   answer) is printed beside its median. Serve's answer cache is turned off (``[answer_cache]
   max_b = 0``) unless ``--answer-cache``: a repeat of the same question would time the cache.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import io
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from gen_dcgm_om import T0, write  # noqa: E402

ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
CLI = "import sys; from service.cli import app; sys.argv[0] = 'gpu-ledger'; app()"


def anchors(days: int, end: int) -> dict[str, tuple[str, dict[str, Any]]]:
    """prom_anchor.py's three questions for a window of ``days`` ending at ``end``."""
    return {
        "a": ("/api/v1/query", {"query": f"avg_over_time(DCGM_FI_DEV_GPU_UTIL[{days}d])", "time": end}),
        "b": (
            "/api/v1/query_range",
            {
                "query": "avg_over_time(DCGM_FI_DEV_GPU_UTIL[1h])",
                "start": T0 + 3600,
                "end": end,
                "step": 3600,
            },
        ),
        "c": (
            "/api/v1/query",
            {
                "query": f"count_over_time((avg_over_time(DCGM_FI_DEV_GPU_UTIL[1h]) < 5)[{days}d:1h])",
                "time": end,
            },
        ),
    }


GQL = {
    "a": "query($w: TimeWindow!){ usage(window:$w, groupBy:[DEVICE]) { device utilizationPct } }",
    "b": """query($w: TimeWindow!, $n: Int, $after: String){
        usage(window:$w, granularity:HOUR, groupBy:[DEVICE], first:$n, after:$after) {
          periodStart device utilizationPct cursor } }""",
    "c": "query($w: TimeWindow!){ idleWaste(window:$w, groupBy:[DEVICE]) { device idleGpuHours } }",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, params: dict[str, Any] | None = None, timeout: float = 600) -> tuple[int, bytes]:
    full = f"{url}?{urllib.parse.urlencode(params)}" if params else url
    try:
        with urllib.request.urlopen(full, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def prom(base: str, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    status, body = get(base + path, params)
    answer = json.loads(body)
    if status != 200 or answer.get("status") != "success":
        raise RuntimeError(f"prometheus {path} {params}: HTTP {status}: {body[:300]!r}")
    return list(answer["data"]["result"])


def graphql(base: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps({"query": query, "variables": variables}).encode()
    request = urllib.request.Request(
        base + "/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        answer = json.loads(response.read())
    if answer.get("errors"):
        raise RuntimeError(f"graphql: {answer['errors']}")
    return dict(answer["data"])


def wait_ready(url: str, proc: subprocess.Popen[bytes], what: str, log: Path, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: {log.read_text()[-2000:]}")
        try:
            if get(url, timeout=2)[0] == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {seconds:.0f} s")
        time.sleep(0.2)


def backfill(workdir: Path, gpus: int, days: int, step: int) -> Path:
    """The Prometheus data directory for this size, generated and backfilled once."""
    data, marker = workdir / "prom-data", workdir / "backfilled"
    if marker.exists() and marker.read_text() == f"{gpus} {days} {step}":
        print(f"data: reusing {data}")
        return data
    shutil.rmtree(data, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    om = workdir / "dcgm.om"
    t = time.perf_counter()
    write(gpus, days, step, str(om))
    generated = time.perf_counter() - t
    t = time.perf_counter()
    promtool = shutil.which("promtool") or "promtool"
    subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--max-block-duration=240h",
            str(om),
            str(data),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    print(
        f"data: generated {om.stat().st_size / 1e9:.2f} GB of OpenMetrics in {generated:.0f} s, "
        f"promtool backfill {time.perf_counter() - t:.0f} s"
    )
    om.unlink()
    marker.write_text(f"{gpus} {days} {step}")
    return data


def start_prometheus(workdir: Path, data: Path) -> tuple[subprocess.Popen[bytes], str]:
    config = workdir / "empty.yml"
    config.write_text("global:\n  scrape_interval: 60s\nscrape_configs: []\n")
    port, log = free_port(), workdir / "prometheus.log"
    proc = subprocess.Popen(
        [
            shutil.which("prometheus") or "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            "--storage.tsdb.retention.time=10y",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/-/ready", proc, "prometheus", log)
    return proc, url


def ledger_config(
    path: Path, database_url: str, prom_url: str, step: int, enabled: bool, no_cache: bool = False
) -> Path:
    path.write_text(
        f'database_url = "{database_url}"\nlog_level = "warning"\n'
        "[auth]\nanonymous_read = true\n"
        + ("[answer_cache]\nmax_b = 0\n" if no_cache else "")
        + f'[[connectors]]\nname = "prom"\ntype = "prometheus"\nurl = "{prom_url}"\nstep_s = {step}\n'
        f"enabled = {'true' if enabled else 'false'}\n"
    )
    return path


def ingest(tree: Path, config: Path, start: dt.datetime, end: dt.datetime) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=str(tree), GPU_LEDGER_LOG_LEVEL="warning")
    t = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CLI, "ingest", "prom", "--start", start.isoformat(), "--end", end.isoformat(),
         "--config", str(config)],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"ingest failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, done.stdout.strip().splitlines()[-1]


def _ledger_rows(database_url: str) -> int:
    """Ledger rows already in a kept database (0 before its first ingest)."""
    from sqlalchemy import text

    from service.db import make_engine

    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            if conn.execute(text("SELECT to_regclass('ledger_hour')")).scalar() is None:
                return 0
            return int(conn.execute(text("SELECT count(*) FROM ledger_hour")).scalar() or 0)
    finally:
        engine.dispose()


#: The (b) export's Arrow buffer compression (``compression=lz4``: 43 → 7 MB on the wire for
#: 1,000 GPUs × 30 days; polars and pyarrow read it).
EXPORT_COMPRESSION = "lz4"


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def hourly_pages(base: str, window: dict[str, str], page: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    after = None
    while True:
        got = graphql(base, GQL["b"], {"w": window, "n": page, "after": after})["usage"]
        rows.extend(got)
        if len(got) < page:
            return rows
        after = got[-1]["cursor"]


def first_call(ms: float | None) -> str:
    return "" if ms is None else f" (first call {ms:,.0f} ms)"


def export_arrow(
    base: str, window: dict[str, str], compression: str | None = EXPORT_COMPRESSION
) -> pl.DataFrame | None:
    """The (b) export, read whole by polars as a user of it would (LZ4 buffers decompressed)."""
    params = {**window, "granularity": "HOUR", "groupBy": "DEVICE"}
    if compression is not None:
        params["compression"] = compression
    status, body = get(f"{base}/export/usage.arrow", params)
    if status == 404:
        return None
    if status == 400 and compression is not None and b'"compression"' in body:
        return export_arrow(base, window, None)  # a tree from before the parameter
    if status != 200:
        raise RuntimeError(f"export: HTTP {status}: {body[:300]!r}")
    try:
        return pl.read_ipc_stream(io.BytesIO(body))
    except Exception:  # noqa: BLE001  (a file rather than a stream)
        return pl.read_ipc(io.BytesIO(body))


def check(
    base: str, prom_url: str, window: dict[str, str], days: int, step: int, gpus: int, page: int
) -> dict[str, float]:
    """Asserts that the answers agree; returns the ledger's first-call times (ms), before any
    answer of the run can be cached."""
    end = T0 + days * 86400
    first: dict[str, float] = {}
    # (a) mean per GPU
    t = time.perf_counter()
    answer_a = graphql(base, GQL["a"], {"w": window})["usage"]
    first["a"] = (time.perf_counter() - t) * 1000
    ledger_a = {r["device"]: r["utilizationPct"] for r in answer_a}
    prom_a = {
        r["metric"]["UUID"]: float(r["value"][1])
        for r in prom(
            prom_url, "/api/v1/query", {"query": f"avg_over_time(DCGM_FI_DEV_GPU_UTIL[{days}d])", "time": end}
        )
    }
    assert ledger_a.keys() == prom_a.keys() and len(prom_a) == gpus, (len(ledger_a), len(prom_a))
    worst_a = max(abs(ledger_a[k] - prom_a[k]) for k in prom_a)
    assert worst_a < 1e-6, worst_a
    # hourly means, [hour, hour + 1 h)
    t = time.perf_counter()
    rows = hourly_pages(base, window, page)
    first["b: GraphQL pages"] = (time.perf_counter() - t) * 1000
    ledger_b = pl.DataFrame(rows).select(
        pl.col("device"),
        pl.col("periodStart").str.to_datetime(time_zone="UTC").dt.epoch("s").alias("hour"),
        pl.col("utilizationPct").alias("ledger"),
    )
    series = prom(
        prom_url,
        "/api/v1/query_range",
        {"query": "avg_over_time(DCGM_FI_DEV_GPU_UTIL[3599999ms])", "start": f"{T0 + 3599.999:.3f}",
         "end": f"{end - 0.001:.3f}", "step": 3600},
    )  # fmt: skip
    prom_b = pl.DataFrame(
        {
            "device": [s["metric"]["UUID"] for s in series for _ in s["values"]],
            "hour": [round(float(v[0]) + 0.001) - 3600 for s in series for v in s["values"]],
            "prom": [float(v[1]) for s in series for v in s["values"]],
        }
    )
    joined = ledger_b.join(prom_b, on=["device", "hour"], how="full")
    assert joined.height == gpus * days * 24 and joined.null_count().sum_horizontal().item() == 0
    worst_b = (joined["ledger"] - joined["prom"]).abs().max()
    assert isinstance(worst_b, float) and worst_b < 1e-6, worst_b
    # idle GPU-hours by the ledger's rule
    t = time.perf_counter()
    answer_c = graphql(base, GQL["c"], {"w": window})["idleWaste"]
    first["c"] = (time.perf_counter() - t) * 1000
    ledger_c = {r["device"]: r["idleGpuHours"] for r in answer_c}
    prom_c: dict[str, float] = {}
    for block in range(0, (gpus + 99) // 100):  # 100 GPUs a query: the subquery holds every step
        query = (
            f'count_over_time((DCGM_FI_DEV_GPU_UTIL{{UUID=~"GPU-{block:06d}[0-9][0-9]"}} < 5)'
            f"[{days}d:{step}s] offset 1ms)"
        )
        for r in prom(prom_url, "/api/v1/query", {"query": query, "time": end}):
            prom_c[r["metric"]["UUID"]] = float(r["value"][1]) * step / 3600
    idle_devices = {k for k, v in ledger_c.items() if v > 0}
    assert idle_devices == set(prom_c), (len(idle_devices), len(prom_c))
    worst_c = max((abs(ledger_c[k] - prom_c[k]) for k in prom_c), default=0.0)
    assert worst_c < 1e-6, worst_c
    print(
        f"agree: (a) {gpus} GPUs, max |Δ| {worst_a:.1e} pp; hourly means {joined.height:,} device-hours, "
        f"max |Δ| {worst_b:.1e} pp; idle GPU-hours (readings < 5 %) {len(prom_c)} GPUs, "
        f"Σ {sum(prom_c.values()):,.2f} h, max |Δ| {worst_c:.1e} h"
    )
    return first


def main() -> None:  # noqa: PLR0915
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=200)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--step", type=int, default=60, help="scrape interval, seconds")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--tree", type=Path, default=ROOT, help="checkout whose gpu-ledger ingests")
    parser.add_argument("--ingest-only", action="store_true", help="stop after the ingest")
    parser.add_argument("--admin-url", default=ADMIN_URL)
    parser.add_argument("--database", help="keep this database (ingest only while it is empty)")
    parser.add_argument(
        "--answer-cache",
        action="store_true",
        help="keep serve's answer cache on (repeats then time cached answers)",
    )
    args = parser.parse_args()
    workdir = args.workdir or Path(f"/tmp/vs_prometheus-{args.gpus}x{args.days}x{args.step}")
    samples = args.gpus * args.days * 86400 // args.step
    start = dt.datetime.fromtimestamp(T0, dt.UTC)
    end = start + dt.timedelta(days=args.days)
    window = {"start": start.isoformat(), "end": end.isoformat()}
    print(
        f"size: {args.gpus} GPUs × {args.days} days × {args.step} s = {samples:,} samples; "
        f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}"
    )

    from sqlalchemy import text

    from service.db import make_engine
    from service.settings import Settings

    data = backfill(workdir, args.gpus, args.days, args.step)
    prometheus, prom_url = start_prometheus(workdir, data)
    database = args.database or f"gpu_ledger_vsprom_{uuid.uuid4().hex[:8]}"
    admin = make_engine(args.admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        exists = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :d"), {"d": database}).first()
        if not exists:
            conn.execute(text(f'CREATE DATABASE "{database}"'))
    database_url = args.admin_url.rsplit("/", 1)[0] + f"/{database}"
    server = None
    try:
        config = ledger_config(workdir / "ingest.toml", database_url, prom_url, args.step, enabled=True)
        if exists and _ledger_rows(database_url):
            print(f"ingest: reusing database {database}")
        else:
            seconds, line = ingest(args.tree, config, start, end)
            print(f"ingest ({args.tree}): {seconds:.1f} s, {samples / seconds:,.0f} samples/s — {line}")
        if args.ingest_only:
            return
        port = free_port()
        # Each repeat should compute its answer: the answer cache (where this tree has one) is off.
        no_cache = "answer_cache" in Settings.model_fields and not args.answer_cache
        serve_config = ledger_config(
            workdir / "serve.toml", database_url, prom_url, args.step, enabled=False, no_cache=no_cache
        )
        print(f"serve: answer cache {'off' if no_cache else 'as configured (on)'}")
        log = workdir / "serve.log"
        server = subprocess.Popen(
            [sys.executable, "-c", CLI, "serve", "--port", str(port), "--config", str(serve_config)],
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        wait_ready(base + "/readyz", server, "gpu-ledger serve", log)
        page = int(Settings.model_fields["aggregate_page_size_max"].default)
        first = check(base, prom_url, window, args.days, args.step, args.gpus, page)

        questions = anchors(args.days, T0 + args.days * 86400)
        t = time.perf_counter()
        exported = export_arrow(base, window)
        first["b: export"] = (time.perf_counter() - t) * 1000
        ledger: dict[str, Callable[[], object]] = {
            "a": lambda: graphql(base, GQL["a"], {"w": window}),
            "b: GraphQL pages": lambda: hourly_pages(base, window, page),
            "c": lambda: graphql(base, GQL["c"], {"w": window}),
        }
        if exported is not None:
            assert exported.height == args.gpus * args.days * 24, exported.height
            ledger["b: export"] = lambda: export_arrow(base, window)
            # The default a reader without LZ4 (arrow-js) gets: the same table, 6× the bytes.
            ledger["b: export, uncompressed"] = lambda: export_arrow(base, window, None)
        times: dict[str, list[float]] = {k: [] for k in ledger}
        prom_times: dict[str, list[float]] = {k: [] for k in "abc"}
        for _ in range(args.repeat):
            for key, fn in ledger.items():
                times[key].append(timed(fn))
                question = key[0]
                path, params = questions[question]
                prom_times[question].append(timed(functools.partial(prom, prom_url, path, params)))
        labels = {
            "a": f"(a) usage(groupBy:[DEVICE]) vs avg_over_time[{args.days}d]",
            "b: GraphQL pages": f"(b) usage(HOUR, DEVICE) as GraphQL pages of {page:,} vs query_range",
            "b: export": f"(b) usage(HOUR, DEVICE) as GET /export/usage.arrow "
            f"(compression={EXPORT_COMPRESSION}) vs query_range",
            "b: export, uncompressed": "(b) usage(HOUR, DEVICE) as GET /export/usage.arrow "
            "(uncompressed) vs query_range",
            "c": "(c) idleWaste(groupBy:[DEVICE]) vs count_over_time subquery",
        }
        print(f"medians of {args.repeat}, interleaved (load {os.getloadavg()[0]:.2f}):")
        for key in (k for k in labels if k in ledger):
            ours, theirs = statistics.median(times[key]), statistics.median(prom_times[key[0]])
            ratio = theirs / ours
            print(
                f"  {labels[key]}: ledger {ours:,.0f} ms{first_call(first.get(key))}, "
                f"Prometheus {theirs:,.0f} ms, ratio {ratio:.1f}×"
            )
        if exported is None:
            print("  (b) export: not available (GET /export/usage.arrow answered 404)")
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        prometheus.terminate()
        prometheus.wait(30)
        if args.database is None:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    np.seterr(all="raise")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop Prometheus and drop the database
    main()
