"""Benchmark (a): normalization throughput, samples/s on one core, in-memory batch → ledger rows written.

    .venv/bin/python bench/normalize_throughput.py [--devices 100] [--hours 24] [--period-s 5] [--strings]
                                                   [--repeat 3] [--baseline REV]
    .venv/bin/python bench/normalize_throughput.py --shape prometheus [--devices 1000] [--period-s 60]
                                                   [--repeat 5] [--baseline REV]

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

``--shape prometheus``: the ingest path's own shape instead — ``bench/vs_prometheus.py``'s data
(``DCGM_FI_DEV_GPU_UTIL`` alone, ``--devices`` GPUs every ``--period-s`` s, bench/gen_dcgm_om.py's
values and labels) for one day's window, read as the ``prometheus`` connector reads it: the
window's 26 h (an hour of presence context either side) in day-long requests, each request's
series mapped by the dcgm profile's ``to_batch`` (Categorical device_id/metric/workload_key), the
batches concatenated as the ingestor does, then ``validate_samples`` and ``normalize``. Times the
three steps (CPU, medians of ``--repeat``); with ``--baseline`` the normalizers of both revisions
alternately, on the same validated batch.
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

from connectors import exporter_profiles  # noqa: E402
from connectors.base import SAMPLE_SCHEMA, DeviceInfo, WorkloadInfo  # noqa: E402
from connectors.dcgm import Series, Stamp  # noqa: E402
from service.db import make_engine  # noqa: E402
from service.ledger import normalize as current  # noqa: E402
from service.ledger import store  # noqa: E402
from service.ledger.ingest import _with_dimensions  # noqa: E402
from service.ledger.normalize import Window, normalize  # noqa: E402
from service.ledger.validate import validate_samples  # noqa: E402
from service.pricing.apply import PriceBook, price_rows  # noqa: E402
from service.pricing.tco import SiteConfig  # noqa: E402

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
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


def prometheus_read(devices: int, period_s: int) -> tuple[list[list[Series]], Window]:
    """``bench/vs_prometheus.py``'s series as the prometheus connector's raw reader returns them
    for the ingest of 2024-10-02 (its 26 h read, day-long requests from the read's start): one
    list of series per request."""
    from gen_dcgm_om import T0, utilization

    start_ms = T0 * 1000 + DAY_MS
    window = Window(start_ms, start_ms + DAY_MS, max_gap_ms=2 * period_s * 1000, presence_gap_ms=HOUR_MS)
    per_gpu = []
    for g in range(devices):
        ts_s, util = utilization(g, 3, period_s)
        labels = {
            "__name__": "DCGM_FI_DEV_GPU_UTIL",
            "gpu": str(g % 8),
            "UUID": f"GPU-{g:08d}",
            "Hostname": f"node-{g // 8:04d}",
            "modelName": "NVIDIA H100 80GB HBM3",
        }
        per_gpu.append((labels, ts_s * 1000, util.astype(np.float64)))
    requests = []
    at = window.read_start_ms
    while at < window.read_end_ms:
        end = min(window.read_end_ms, at + DAY_MS)
        found = []
        for labels, ts, values in per_gpu:
            lo, hi = np.searchsorted(ts, [at, end])
            found.append(Series("DCGM_FI_DEV_GPU_UTIL", labels, ts[lo:hi], values[lo:hi]))
        requests.append(found)
        at = end
    return requests, window


def ingest_path(requests: list[list[Series]]) -> tuple[pl.DataFrame, set[str], float, float]:
    """The connector's mapping and the ingestor's concatenation and validation of one read: the
    accepted samples, the devices, and the CPU seconds of ``to_batch`` and of validation."""
    profile = exporter_profiles.profile("dcgm")
    cpu0 = time.process_time()
    batches = [profile.to_batch(profile.canonical(series), Stamp()) for series in requests]
    samples = pl.concat([b.samples for b in batches], how="vertical_relaxed")
    cpu1 = time.process_time()
    devices = {d.device_id for b in batches for d in b.devices}
    checked = validate_samples(samples, devices)
    cpu2 = time.process_time()
    assert checked.rejected == 0
    return checked.accepted, devices, cpu1 - cpu0, cpu2 - cpu1


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def prometheus_shape(devices: int, period_s: int, repeat: int, rev: str | None) -> None:
    """``--shape prometheus`` (see the module docstring)."""
    requests, window = prometheus_read(devices, period_s)
    samples, _, _, _ = ingest_path(requests)
    schema = samples.schema
    print(
        f"batch: {samples.height:,} samples = {devices} GPUs × 1 metric every {period_s} s × "
        f"{(window.read_end_ms - window.read_start_ms) // HOUR_MS} h read in {len(requests)} requests; "
        f"device_id {schema['device_id']}, metric {schema['metric']}, workload_key {schema['workload_key']}"
    )
    if rev:
        compare(samples, window, rev, repeat)
    times: dict[str, list[float]] = {"to_batch": [], "validation": [], "normalize": [], "total": []}
    for _ in range(repeat + 1):  # the first run warms the allocator up and is not counted
        accepted, _, to_batch_s, validate_s = ingest_path(requests)
        cpu0 = time.process_time()
        rows = normalize(accepted, window)
        normalize_s = time.process_time() - cpu0
        for name, value in zip(
            times, (to_batch_s, validate_s, normalize_s, to_batch_s + validate_s + normalize_s), strict=True
        ):
            times[name].append(value)
    for name in times:
        del times[name][0]
    print(
        f"{rows.height:,} ledger rows; CPU s per run, median of {repeat}, "
        f"load average {os.getloadavg()[0]:.1f}:"
    )
    for name, values in times.items():
        m = median(values)
        print(
            f"  {name:>10}: {' '.join(f'{v:.3f}' for v in values)}; median {m:.3f} s "
            f"({samples.height / m / 1e6:.2f} M samples/s per core)"
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


def compare(samples: pl.DataFrame, window: Window, rev: str, repeat: int) -> None:
    """``normalize`` now and at ``rev``: the same rows, then CPU time alternately."""
    from polars.testing import assert_frame_equal

    old = baseline_module(rev)
    windows = {
        name: module.Window(window.start_ms, window.end_ms, window.max_gap_ms, window.presence_gap_ms)
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
    parser.add_argument("--shape", choices=["scrape", "prometheus"], default="scrape")
    parser.add_argument("--devices", type=int, help="default 100 (scrape), 1000 (prometheus)")
    parser.add_argument("--hours", type=int, default=24, help="scrape only")
    parser.add_argument("--period-s", type=float, help="default 5 (scrape), 60 (prometheus)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--strings", action="store_true", help="String columns instead of Categorical")
    parser.add_argument("--baseline", metavar="REV", help="also time normalize.py of this git revision")
    args = parser.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, polars {pl.__version__}, "
        f"POLARS_MAX_THREADS={os.environ['POLARS_MAX_THREADS']}"
    )
    if args.shape == "prometheus":
        prometheus_shape(args.devices or 1000, int(args.period_s or 60), args.repeat, args.baseline)
        return
    args.devices, args.period_s = args.devices or 100, args.period_s or 5.0
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
        f"batch: {samples.height:,} samples = {args.devices} devices × {args.hours} h × "
        f"{len(METRICS)} metrics every {args.period_s:g} s; "
        f"{'String' if args.strings else 'Categorical'} device_id/metric/workload_key"
    )
    if args.baseline:
        compare(samples, window, args.baseline, args.repeat)
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
