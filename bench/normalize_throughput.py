"""Benchmark (a): normalization throughput, samples/s on one core, in-memory batch → ledger rows written.

    .venv/bin/python bench/normalize_throughput.py [--devices 100] [--hours 24] [--period-s 5] [--strings]
                                                   [--repeat 3] [--baseline REV]

Builds one DCGM-like batch (gpu_util, sm_active, power_w, energy_j, mem_used_b, temp_c per device,
a workload change per device every half hour), series after series as a connector hands them
over, with Categorical ``device_id``/``metric``/``workload_key`` columns (``--strings``: String
columns, as connectors handed them before issue 13). Then times ``normalize`` alone (issue 13's
"normalization, one core" figure) and normalize → price → write into a fresh SQLite file (the
same calls the ingestor makes). Reports wall and process CPU time; with POLARS_MAX_THREADS=1 the
CPU time is one core's.

``--baseline REV``: also loads ``service/ledger/normalize.py`` as it was at git revision ``REV``,
checks that it gives the same rows bit for bit, and times the two alternately (``normalize``
alone, CPU time), so both see the same machine load; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

os.environ.setdefault("POLARS_MAX_THREADS", "1")
# The allocator policy the server runs with (service/__init__.py); it must be set before polars loads.
os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:10000,muzzy_decay_ms:10000")

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from sqlmodel import SQLModel  # noqa: E402

from connectors.base import SAMPLE_SCHEMA, DeviceInfo, WorkloadInfo  # noqa: E402
from service.db import make_engine  # noqa: E402
from service.ledger import normalize as current  # noqa: E402
from service.ledger import store  # noqa: E402
from service.ledger.ingest import _with_dimensions  # noqa: E402
from service.ledger.normalize import Window, normalize  # noqa: E402
from service.pricing.apply import PriceBook, price_rows  # noqa: E402
from service.pricing.tco import SiteConfig  # noqa: E402

HOUR_MS = 3_600_000
METRICS = ["gpu_util", "sm_active", "power_w", "energy_j", "mem_used_b", "temp_c"]


def batch(devices: int, hours: int, period_ms: int, seed: int = 7, strings: bool = False) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    ts = np.arange(0, hours * HOUR_MS, period_ms, dtype=np.int64)
    per_device = len(ts) * len(METRICS)
    n = per_device * devices
    dev = np.repeat(np.arange(devices), per_device)
    metric = np.tile(np.repeat(np.arange(len(METRICS)), len(ts)), devices)
    t = np.tile(ts, devices * len(METRICS))
    value = rng.uniform(0, 100, n)
    energy = metric == METRICS.index("energy_j")
    value[energy] = (t[energy] / 1000.0) * 400.0  # a 400 W counter in joules
    workload = (t // (HOUR_MS // 2)) % 3  # a pod change every half hour
    frame = pl.DataFrame(
        {
            "device_id": pl.Series(np.char.add("GPU-", dev.astype(str))),
            "ts_ms": t,
            "metric": pl.Series(np.asarray(METRICS)[metric]),
            "value": value,
            "workload_key": pl.Series(np.char.add("k8s:ns/pod-", workload.astype(str))),
            "share": np.ones(n),
        },
        schema=SAMPLE_SCHEMA,
    )
    return (
        frame
        if strings
        else frame.with_columns(pl.col("device_id", "metric", "workload_key").cast(pl.Categorical))
    )


def baseline_module(rev: str) -> ModuleType:
    """``service/ledger/normalize.py`` at git revision ``rev``, imported under its own name."""
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(["git", "show", f"{rev}:service/ledger/normalize.py"], cwd=root,
                            check=True, capture_output=True, text=True).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp(prefix="gl-baseline-")) / "normalize_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("normalize_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["normalize_baseline"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def compare(samples: pl.DataFrame, hours: int, period_s: float, rev: str, repeat: int) -> None:
    """``normalize`` now and at ``rev``: the same rows, then CPU time alternately."""
    from polars.testing import assert_frame_equal

    old = baseline_module(rev)
    windows = {
        name: module.Window(0, hours * HOUR_MS, max_gap_ms=int(2 * period_s * 1000), presence_gap_ms=HOUR_MS)
        for name, module in (("baseline", old), ("now", current))
    }
    assert_frame_equal(
        old.normalize(samples, windows["baseline"]),
        current.normalize(samples, windows["now"]),
        check_exact=True,
    )
    print(f"baseline {rev}: the same ledger rows, bit for bit")
    times: dict[str, list[float]] = {"baseline": [], "now": []}
    loads = []
    for attempt in range(repeat):
        order = [("baseline", old), ("now", current)]
        for name, module in order if attempt % 2 == 0 else order[::-1]:
            cpu0 = time.process_time()
            module.normalize(samples, windows[name])
            times[name].append(time.process_time() - cpu0)
        loads.append(os.getloadavg()[0])
    for name, values in times.items():
        ordered = sorted(values)
        median = ordered[len(ordered) // 2]
        print(
            f"{name:>8}: normalize alone, CPU s {' '.join(f'{v:.2f}' for v in values)}; median {median:.2f} "
            f"({samples.height / median / 1e6:.2f} M samples/s per core), best {ordered[0]:.2f} "
            f"({samples.height / ordered[0] / 1e6:.2f} M/s)"
        )
    ratio = sorted(n / b for n, b in zip(times["now"], times["baseline"], strict=True))
    print(
        f"now / baseline CPU per pair: {' '.join(f'{r:.2f}' for r in ratio)} "
        f"(median {ratio[len(ratio) // 2]:.2f}); "
        f"load average during the pairs {min(loads):.1f}–{max(loads):.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=100)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--period-s", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--strings", action="store_true", help="String columns instead of Categorical")
    parser.add_argument("--baseline", metavar="REV", help="also time normalize.py of this git revision")
    args = parser.parse_args()
    samples = batch(args.devices, args.hours, int(args.period_s * 1000), strings=args.strings)
    devices = {
        f"GPU-{i}": DeviceInfo(f"GPU-{i}", "onprem", region="dc1", gpu_model="H100", tdp_w=700.0)
        for i in range(args.devices)
    }
    workloads = {f"k8s:ns/pod-{i}": WorkloadInfo(f"k8s:ns/pod-{i}", project=f"p{i}") for i in range(3)}
    site = SiteConfig(
        name="dc1",
        match_region="dc1",
        currency="USD",
        capex_per_gpu={"H100": "30000"},
        price_per_kwh="0.12",
        pue="1.3",
    )
    book = PriceBook.from_rates([], [site])
    window = Window(
        0, args.hours * HOUR_MS, max_gap_ms=int(2 * args.period_s * 1000), presence_gap_ms=HOUR_MS
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, polars {pl.__version__}, "
        f"POLARS_MAX_THREADS={os.environ['POLARS_MAX_THREADS']}"
    )
    print(
        f"batch: {samples.height:,} samples = {args.devices} devices × {args.hours} h × "
        f"{len(METRICS)} metrics every {args.period_s:g} s; "
        f"{'String' if args.strings else 'Categorical'} device_id/metric/workload_key"
    )
    if args.baseline:
        compare(samples, args.hours, args.period_s, args.baseline, args.repeat)
    for attempt in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            engine = make_engine(f"sqlite:///{tmp}/bench.db")
            SQLModel.metadata.create_all(engine)
            usage0 = resource.getrusage(resource.RUSAGE_SELF)
            wall0, cpu0 = time.perf_counter(), time.process_time()
            normalized = normalize(samples, window)
            norm_wall, norm_cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            rows = price_rows(_with_dimensions(normalized, "bench", devices, workloads), book)
            with engine.begin() as conn:
                written = store.replace_hours(conn, "bench", 0, args.hours, sorted(devices), rows)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            usage1 = resource.getrusage(resource.RUSAGE_SELF)
            user, system = usage1.ru_utime - usage0.ru_utime, usage1.ru_stime - usage0.ru_stime
            engine.dispose()
        print(
            f"run {attempt + 1}: normalize alone: wall {norm_wall:.2f} s, CPU {norm_cpu:.2f} s "
            f"({samples.height / norm_cpu / 1e6:.2f} M samples/s per core); whole pipeline: "
            f"{written:,} ledger rows written; "
            f"wall {wall:.2f} s ({samples.height / wall / 1e6:.2f} M samples/s), "
            f"CPU {cpu:.2f} s ({samples.height / cpu / 1e6:.2f} M samples/s per core; "
            f"user {user:.2f} s, system {system:.2f} s)"
        )


if __name__ == "__main__":
    main()
