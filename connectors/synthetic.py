"""``synthetic``: a seeded, realistic GPU fleet for the demo and for tests.

The fleet itself is data in ``connectors.synthetic_fleet``: DGX nodes under Kubernetes in a data
centre, GPU VMs in AWS, GCP and Azure; training, inference, idle notebooks, launch-bound jobs, a
MIG-partitioned and a time-sliced GPU, exporter outages, a stopped VM and an energy-counter reset.

Every sample is a pure function of (seed, device, timestamp), never of the window asked for, so
collecting ``[a, c)`` gives exactly the samples of ``[a, b)`` plus ``[b, c)``. How:

* Slow state (which job runs, its load, outages) lives on 5-minute blocks of a 28-day cycle that
  repeats forever (28 days keep weekdays in step). It is drawn once per connector, per placement,
  from ``(seed, placement)`` and cached. Pod names carry the cycle number, so no name repeats.
* Each sample adds noise from a counter-based hash of (seed, device, sample slot, metric).
* The energy counter integrates the block-level power in closed form: whole cycles since the
  epoch × one cycle's energy + this cycle's energy up to the block + power × time into the block.
  Power samples are that power plus noise, so counter deltas and power × time agree.

Samples lie on a fixed grid: ``k × period_s`` since the epoch plus a fixed per-node offset below
half a period (on-prem scrapes); cloud samples are on the period, as CloudWatch reports them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar, Literal

import numpy as np
import polars as pl
from pydantic import Field, model_validator

from connectors.sdk import (
    MEASURED_METRICS,
    SAMPLE_SCHEMA,
    ConnectorConfig,
    DeviceInfo,
    SampleBatch,
    Sampling,
    WorkloadInfo,
    to_ms,
)
from connectors.synthetic_fleet import (
    BLOCK_S,
    BLOCKS_PER_DAY,
    MIB,
    PROFILES,
    VM,
    DeviceSpec,
    Placement,
    build_fleet,
    digest,
    workload_info,
)

CYCLE_DAYS = 28
CYCLE_BLOCKS = CYCLE_DAYS * BLOCKS_PER_DAY
BLOCK_MS = BLOCK_S * 1000
DAY_MS = 86_400_000
CYCLE_MS = CYCLE_DAYS * DAY_MS
JOB_CAP = 1 << 16  # job j of lane L is coded L * JOB_CAP + j (a lane runs far fewer jobs per cycle)
ROWS_PER_BATCH = 1_000_000  # about; a batch is one UTC day of as many of a pool's devices as fit
METRICS = tuple(m.value for m in MEASURED_METRICS)
LEVELS = ("busy", "sm", "tensor", "membw")  # % levels behind gpu_util, sm_active, tensor_active, mem_bw
#: metric → (level it reads, noise channel)
_PCT = {"sm_active": ("sm", 12), "tensor_active": ("tensor", 13), "mem_bw": ("membw", 14)}

_BLOCKS = np.arange(CYCLE_BLOCKS, dtype=np.int64)
_HOUR = (_BLOCKS % BLOCKS_PER_DAY) * (24 / BLOCKS_PER_DAY)  # UTC hour at the start of each block
_WEEKEND = (_BLOCKS // BLOCKS_PER_DAY + 3) % 7 >= 5  # cycles start on a Thursday, as 1970-01-01 did


class SyntheticConfig(ConnectorConfig):
    """``type = "synthetic"``: a generated fleet of about 90 GPUs (× ``scale``).

    ``seed`` fixes every random choice; ``period_s`` is the sample period in seconds; ``scale``
    multiplies the nodes of every pool (benchmarks; incidents stay on the first copy).

    ``growth_pct_per_week`` (default 0: the fleet never changes) makes the fleet grow by that much
    a week, compounded, up to ``growth_until`` (required with it), when every device is there: the
    fleet's N devices, ranked by a stable hash of their ids, get ``u = (rank + ½) / N`` and come
    online at ``growth_until + ln(u) / ln(1 + g)`` weeks, so the devices present ``k`` weeks before
    ``growth_until`` are ``(1 + g)^-k`` of the fleet to within one device — a known growth of the
    GPUs present and held (the forecast's backtest). Before its onset a device sends nothing; its
    workloads run as they would have.
    """

    name: str = "synthetic"
    type: str = "synthetic"
    seed: int = Field(42, ge=0)
    period_s: float = Field(60.0, ge=1.0, le=3600.0)
    scale: int = Field(1, ge=1, le=1000)
    growth_pct_per_week: float = Field(0.0, ge=0.0, le=100.0)
    growth_until: dt.datetime | None = None

    @model_validator(mode="after")
    def _growth_has_an_end(self) -> SyntheticConfig:
        if self.growth_pct_per_week > 0 and self.growth_until is None:
            raise ValueError("growth_pct_per_week needs growth_until: the instant every node is online")
        if self.growth_until is not None and self.growth_until.tzinfo is None:
            raise ValueError("growth_until needs a timezone (UTC: …Z)")
        return self


# --- counter-based randomness -----------------------------------------------------------------


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer: a bijection of uint64 that scrambles every bit (wrapping is intended)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _uniform(keys: np.ndarray | np.uint64, counter: np.ndarray, channel: int) -> np.ndarray:
    """Uniform on [0, 1), elementwise a pure function of (device key, counter, channel)."""
    salt = np.uint64((channel * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64)
    x = _mix64(counter.astype(np.uint64) * np.uint64(0xD1B54A32D192ED03) + (keys ^ salt))
    return (x >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _device_key(seed: int, device_id: str) -> np.uint64:
    return np.uint64(int.from_bytes(digest("synthetic", seed, device_id)[:8], "big"))


# --- slow state: one cycle of blocks ----------------------------------------------------------


#: job per block of the cycle (-1: none), load level per job, memory fraction per job
Schedule = tuple[np.ndarray, np.ndarray, np.ndarray]


def _schedule(rng: np.random.Generator, profile_name: str) -> Schedule:
    """Back-to-back jobs with gaps, cut to one cycle; the cycle starts in the middle of a job."""
    profile = PROFILES[profile_name]
    lo, hi = (max(1, round(h * 12)) for h in profile.job_h)
    gap_lo, gap_hi = (round(h * 12) for h in profile.gap_h)
    n = (CYCLE_BLOCKS + hi + gap_hi) // (lo + gap_lo) + 2
    lengths, gaps = rng.integers(lo, hi + 1, n), rng.integers(gap_lo, gap_hi + 1, n)
    phase = int(rng.integers(0, lengths[0] + gaps[0]))
    runs = np.stack([np.arange(n), np.full(n, -1)], axis=1).ravel()
    job = np.repeat(runs, np.stack([lengths, gaps], axis=1).ravel())[phase : phase + CYCLE_BLOCKS]
    return job.astype(np.int32), rng.uniform(*profile.level, n), rng.uniform(*profile.mem, n)


def _lane(placement: Placement, schedule: Schedule, key: np.uint64, lane_no: int) -> dict[str, np.ndarray]:
    """One workload's load on one device over the cycle: % levels, memory fraction, occupancy."""
    salt = 8 * lane_no  # two workloads on one device draw different noise
    job, level, mem = schedule
    run = job >= 0
    lvl = level[np.where(run, job, 0)]
    u = [_uniform(key, _BLOCKS, salt + channel) for channel in (1, 2, 3)]
    kind = PROFILES[placement.profile].kind
    if kind == "train":
        dip = u[1] < 0.05  # evaluation or checkpoint: the GPUs wait on storage
        sm = np.where(dip, 0.12, 1.0) * (lvl + 6 * (u[0] - 0.5))
        busy = np.where(dip, 30.0, 97.0 + 3 * u[2])
        tensor, membw = 0.78 * sm, 0.42 * sm
    elif kind == "infer":
        wave = 0.5 - 0.5 * np.cos(2 * np.pi * (_HOUR - 4) / 24)  # quietest 04:00 UTC, busiest 16:00
        busy = lvl * (0.35 + 0.65 * wave * np.where(_WEEKEND, 0.7, 1.0)) + 4 * (u[0] - 0.5)
        sm = 0.55 * busy
        tensor, membw = 0.5 * sm, 0.8 * sm
    elif kind == "notebook":
        hourly = _uniform(key, _BLOCKS // 12, salt + 4)  # people work in whole hours, on weekday afternoons
        burst = (hourly < 0.3) & (_HOUR >= 14) & (_HOUR < 23) & ~_WEEKEND
        busy = np.where(burst, lvl * (0.8 + 0.4 * u[0]), 0.0)
        sm = 0.6 * busy
        tensor, membw = 0.3 * sm, 0.5 * sm
    elif kind == "launch":  # tiny kernels and host syncs: "GPU util" high, SMs nearly idle
        busy, sm = lvl + 20 * (u[0] - 0.5), 0.3 + 2.0 * u[1]
        tensor, membw = np.zeros(CYCLE_BLOCKS), 0.2 + 0.6 * u[2]
    else:  # batch
        sm = lvl + 6 * (u[0] - 0.5)
        busy = np.minimum(sm + 12, 100.0)
        tensor, membw = 0.6 * sm, 0.5 * sm
    pct = zip(LEVELS, (busy, sm, tensor, membw), strict=True)
    out = {k: np.where(run, np.clip(v, 0.0, 100.0), 0.0) for k, v in pct}
    out["mem"] = np.where(run, mem[np.where(run, job, 0)], 0.0)
    out["held"] = run
    # A cloud VM is its team's whenever it runs; a pod only while it exists.
    out["occ"] = np.zeros(CYCLE_BLOCKS, np.int32) if placement.key == VM else job
    return out


@dataclass(slots=True)
class _PoolCycle:
    """One pool's devices over one cycle, shape (devices, blocks); energy in float64 for the counter."""

    specs: list[DeviceSpec]
    keys: np.ndarray  # uint64 per device
    present: np.ndarray  # bool: samples exist
    occ: np.ndarray  # int32 workload code of the main row, -1: unallocated
    extra: np.ndarray  # int32 code of a second, time-sliced workload, -1: none
    share: np.ndarray  # float32 share of the main workload while there is a second one
    levels: dict[str, np.ndarray]  # LEVELS and "mem" (fraction), float32
    power_w: np.ndarray  # float32
    ecum_j: np.ndarray  # float64: energy since the cycle began, at each block's start
    e_cycle_j: np.ndarray  # float64 per device: energy of a whole cycle
    device_ids: pl.Series
    metrics: pl.Series  # metrics any device of the pool reports
    has: np.ndarray  # bool (metrics, devices)
    scrape_frac: np.ndarray
    reset_block: np.ndarray
    mem_total_b: np.ndarray  # float64
    temp_c_per_w: np.ndarray
    onset_ms: np.ndarray  # int64 per device: no samples before (growth; ALWAYS without)


ALWAYS = int(np.iinfo(np.int64).min)


def onsets_ms(config: SyntheticConfig, device_ids: list[str]) -> dict[str, int]:
    """When each device comes online under the config's growth (see :class:`SyntheticConfig`)."""
    g = config.growth_pct_per_week / 100.0
    if g <= 0 or config.growth_until is None:
        return dict.fromkeys(device_ids, ALWAYS)
    ranked = sorted(device_ids, key=lambda d: digest("growth", d))
    u = (np.arange(len(ranked)) + 0.5) / len(ranked)
    weeks = np.log(u) / np.log1p(g)
    until = to_ms(config.growth_until)
    return {d: until + int(w * 7 * DAY_MS) for d, w in zip(ranked, weeks.tolist(), strict=True)}


def _pool_cycle(
    specs: list[DeviceSpec],
    seed: int,
    schedules: dict[tuple[str, int], Schedule],
    onsets: np.ndarray | None = None,
) -> _PoolCycle:
    n = len(specs)
    keys = np.array([_device_key(seed, s.info.device_id) for s in specs], dtype=np.uint64)
    shape = (n, CYCLE_BLOCKS)
    present, held = np.ones(shape, bool), np.zeros(shape, bool)
    occ, extra, share = np.full(shape, -1, np.int32), np.full(shape, -1, np.int32), np.ones(shape, np.float32)
    levels = {k: np.zeros(shape) for k in (*LEVELS, "mem")}
    for i, spec in enumerate(specs):  # a loop per device, once per connector
        for first, last in spec.absences:
            present[i, first:last] = False
        lanes = []
        for lane_no, (placement, _rank, replica) in enumerate(spec.lanes):
            lane = _lane(placement, schedules[placement.name, replica], keys[i], lane_no)
            for k in levels:
                levels[k][i] += lane[k]
            held[i] |= lane["held"]
            lanes.append((np.where(lane["occ"] >= 0, lane_no * JOB_CAP + lane["occ"], -1), lane["sm"]))
        if len(lanes) == 1:
            occ[i] = lanes[0][0]
        elif len(lanes) == 2:  # time-sliced: split by SM activity, as per-process GPM would
            (a, sm_a), (b, sm_b) = lanes
            both = (a >= 0) & (b >= 0)
            occ[i], extra[i] = np.where(a >= 0, a, b), np.where(both, b, -1)
            total = sm_a + sm_b
            share[i] = np.where(total > 0, sm_a / np.where(total > 0, total, 1.0), 0.5)
    for k in levels:
        levels[k] = np.clip(levels[k], 0.0, 100.0 if k != "mem" else 0.97)

    def per_device(attr: str, dtype: type = np.float64) -> np.ndarray:
        return np.array([getattr(s, attr) for s in specs], dtype=dtype)

    idle, ctx, tdp = (per_device(attr)[:, None] for attr in ("idle_w", "ctx_w", "tdp_w"))
    load = np.clip(0.85 * levels["sm"] + 0.2 * levels["membw"] + 0.05 * levels["busy"], 0.0, 100.0) / 100
    power_w = (idle + ctx * held + (tdp - idle - ctx) * load).astype(np.float32)
    block_j = power_w.astype(np.float64) * BLOCK_S
    ecum_j = np.cumsum(block_j, axis=1) - block_j
    metrics = [m for m in METRICS if any(m in s.metrics for s in specs)]
    return _PoolCycle(
        specs=specs,
        keys=keys,
        present=present,
        occ=occ,
        extra=extra,
        share=share,
        levels={k: v.astype(np.float32) for k, v in levels.items()},
        power_w=power_w,
        ecum_j=ecum_j,
        e_cycle_j=ecum_j[:, -1] + block_j[:, -1],
        device_ids=pl.Series([s.info.device_id for s in specs], dtype=pl.String),
        metrics=pl.Series(metrics, dtype=pl.String),
        has=np.array([[m in s.metrics for s in specs] for m in metrics]),
        scrape_frac=per_device("scrape_frac"),
        reset_block=per_device("reset_block", np.int64),
        mem_total_b=per_device("mem_total_b"),
        temp_c_per_w=per_device("temp_c_per_w"),
        onset_ms=np.full(n, ALWAYS, np.int64) if onsets is None else onsets,
    )


# --- the connector ----------------------------------------------------------------------------


class SyntheticConnector:
    """A deterministic fleet of about 90 GPUs in four environments (see the module docstring)."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = SyntheticConfig

    def __init__(
        self,
        config: SyntheticConfig | None = None,
        *,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.config = config or SyntheticConfig()
        self._clock = clock  # like a real source, nothing is known about the future
        self.sampling = Sampling.every(self.config.period_s)
        self._period_ms = round(self.config.period_s * 1000)
        self._specs = build_fleet(self.config.scale)

    def discover(self) -> list[DeviceInfo]:
        return [s.info for s in self._specs]

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        """Samples with ``start <= ts < min(end, now)``; a batch is one UTC day of some of one pool's
        devices (about ``ROWS_PER_BATCH`` rows at most)."""
        lo, hi = to_ms(start), min(to_ms(end), to_ms(self._clock()))
        for day in range(lo // DAY_MS, -(-hi // DAY_MS)):
            day_lo, day_hi = max(lo, day * DAY_MS), min(hi, (day + 1) * DAY_MS)
            if day_lo >= day_hi:
                continue
            for pool in self._cycles:
                per_device = DAY_MS // self._period_ms * len(pool.metrics)
                chunk = max(1, ROWS_PER_BATCH // per_device)
                for first in range(0, len(pool.specs), chunk):
                    rows = range(first, min(first + chunk, len(pool.specs)))
                    batch = self._batch(pool, rows, day_lo, day_hi)
                    if batch is not None:
                        yield batch

    @cached_property
    def _cycles(self) -> list[_PoolCycle]:
        seed = self.config.seed
        schedules = {}
        for spec in self._specs:
            for placement, _rank, replica in spec.lanes:
                if (placement.name, replica) not in schedules:
                    entropy = int.from_bytes(digest(placement.name, replica)[:8], "big")
                    rng = np.random.default_rng([seed, entropy])
                    schedules[placement.name, replica] = _schedule(rng, placement.profile)
        pools: dict[str, list[DeviceSpec]] = {}
        for spec in self._specs:
            pools.setdefault(spec.pool, []).append(spec)
        onsets = onsets_ms(self.config, [s.info.device_id for s in self._specs])
        return [
            _pool_cycle(specs, seed, schedules, np.array([onsets[s.info.device_id] for s in specs]))
            for specs in pools.values()
        ]

    def _batch(self, pool: _PoolCycle, rows: range, lo: int, hi: int) -> SampleBatch | None:
        """Samples of the pool's devices ``rows`` in ``[lo, hi)`` ms, which lies inside one UTC day."""
        period = self._period_ms
        offset = (pool.scrape_frac[rows.start : rows.stop] * period).astype(np.int64)
        slot = np.arange((lo - int(offset.max())) // period, (hi - 1) // period + 1, dtype=np.int64)
        ts = slot[None, :] * period + offset[:, None]
        blk = (ts // BLOCK_MS) % CYCLE_BLOCKS
        flat = np.arange(rows.start, rows.stop)[:, None] * CYCLE_BLOCKS + blk  # into (device, block) arrays
        online = ts >= pool.onset_ms[rows.start : rows.stop, None]
        d, s = np.nonzero((ts >= lo) & (ts < hi) & np.take(pool.present, flat) & online)
        if d.size == 0:
            return None
        ts, blk, flat, slot = ts[d, s], blk[d, s], flat[d, s], slot[s]
        day_first = lo // DAY_MS * DAY_MS // BLOCK_MS % CYCLE_BLOCKS  # the day's first block of the cycle
        day_flat = d * BLOCKS_PER_DAY + blk - day_first  # into (device of this batch, block of the day)
        d += rows.start  # the pool's device row from here on
        cycle = lo // CYCLE_MS
        values = self._values(pool, d, flat, slot, ts, cycle)  # (metrics, samples)
        infos, wl_index = self._workloads(pool, rows, day_first, cycle)
        wl = np.take(wl_index[0], day_flat)
        share = np.ones(d.size)
        sliced = np.flatnonzero(np.take(pool.extra, flat) >= 0)
        a = np.take(pool.share, flat[sliced]).astype(np.float64)
        big = np.maximum(a, 1.0 - a)  # 1 - big is exact for big >= 0.5: the two shares add to exactly 1
        share[sliced] = np.where(a >= 0.5, big, 1.0 - big)
        names = pl.Series([i.workload_key if i is not None else "" for i in infos], dtype=pl.String)
        dev = pl.Series(d, dtype=pl.Int32)
        # Wide (one column per metric) first, then one row per reading: strings are gathered once.
        wide = [self._wide(pool, dev, ts, values, names.gather(pl.Series(wl, dtype=pl.Int32)), share)]
        has = pool.has[:, d]  # (metrics, samples): does the device report the metric
        used = np.bincount(wl, minlength=len(infos)) > 0
        if sliced.size:  # time-sliced: the same reading once more, for the second workload
            wl2 = np.take(wl_index[1], day_flat[sliced])
            share2 = np.where(a >= 0.5, 1.0 - big, big)
            wide.append(
                self._wide(
                    pool,
                    dev.gather(sliced),
                    ts[sliced],
                    values[:, sliced],
                    names.gather(pl.Series(wl2, dtype=pl.Int32)),
                    share2,
                )
            )
            has = np.concatenate([has, has[:, sliced]], axis=1)
            used[wl2] = True
        samples = pl.concat(wide).unpivot(
            on=pool.metrics.to_list(),
            index=["device_id", "ts_ms", "workload_key", "share"],
            variable_name="metric",
            value_name="value",
        )
        if not has.all():
            samples = samples.filter(pl.Series(has.ravel()))
        samples = samples.select(SAMPLE_SCHEMA.keys())
        workloads = {i.workload_key: i for i, u in zip(infos, used, strict=True) if i is not None and u}
        devices = [s.info for s in pool.specs[rows.start : rows.stop]]
        return SampleBatch(samples, devices, list(workloads.values()))

    @staticmethod
    def _wide(
        pool: _PoolCycle,
        dev: pl.Series,
        ts: np.ndarray,
        values: np.ndarray,
        workload_key: pl.Series,
        share: np.ndarray,
    ) -> pl.DataFrame:
        columns = {
            "device_id": pool.device_ids.gather(dev),
            "ts_ms": ts,
            "workload_key": workload_key,
            "share": share,
        }
        columns.update(zip(pool.metrics.to_list(), values, strict=True))
        return pl.DataFrame(columns)

    def _values(
        self, pool: _PoolCycle, d: np.ndarray, flat: np.ndarray, slot: np.ndarray, ts: np.ndarray, cycle: int
    ) -> np.ndarray:
        """Readings (pool metrics × samples): block levels plus noise; energy from the closed-form counter."""
        keys = pool.keys[d]

        def noise(channel: int) -> np.ndarray:  # uniform on [-1, 1)
            return 2.0 * _uniform(keys, slot, channel) - 1.0

        def level(name: str) -> np.ndarray:
            return np.take(pool.levels[name], flat).astype(np.float64)

        out = np.empty((len(pool.metrics), d.size))
        power_w = np.take(pool.power_w, flat).astype(np.float64)
        sample_power_w = power_w * (1 + 0.015 * noise(15))
        for row, metric in enumerate(pool.metrics.to_list()):
            if metric == "gpu_util":
                busy = level("busy")
                out[row] = np.where(busy > 0, np.clip(busy + 3 * noise(11), 0.0, 100.0), 0.0)
            elif metric in _PCT:
                name, channel = _PCT[metric]
                out[row] = np.clip(level(name) * (1 + 0.05 * noise(channel)), 0.0, 100.0)
            elif metric == "power_w":
                out[row] = sample_power_w
            elif metric == "energy_j":
                e_cycle = pool.e_cycle_j[d]
                energy = cycle * e_cycle + np.take(pool.ecum_j, flat) + power_w * ((ts % BLOCK_MS) / 1000)
                reset = pool.reset_block[d]
                if (reset >= 0).any():  # the counter counts from the latest reset at or before ts
                    after = flat % CYCLE_BLOCKS >= reset
                    since = np.where(after, cycle, cycle - 1) * e_cycle + pool.ecum_j[d, np.maximum(reset, 0)]
                    energy -= np.where(reset >= 0, since, 0.0)
                out[row] = energy
            elif metric == "mem_used_b":
                out[row] = np.round(level("mem") * pool.mem_total_b[d] / MIB) * MIB
            elif metric == "mem_total_b":
                out[row] = pool.mem_total_b[d]
            elif metric == "temp_c":
                out[row] = np.round(30.0 + pool.temp_c_per_w[d] * sample_power_w + noise(16))
        return out

    def _workloads(
        self, pool: _PoolCycle, rows: range, day_first: int, cycle: int
    ) -> tuple[list[WorkloadInfo | None], np.ndarray]:
        """The workloads of one day's blocks (None: unallocated) and, shaped (main | extra, device,
        block of the day), each block's index into that list."""
        day = slice(day_first, day_first + BLOCKS_PER_DAY)
        mine = slice(rows.start, rows.stop)
        codes = np.stack([pool.occ[mine, day], pool.extra[mine, day]]).astype(np.int64)
        row_base = np.arange(rows.start, rows.stop)[None, :, None] * (2 * JOB_CAP)
        ids = np.where(codes >= 0, row_base + codes, -1)
        unique, inverse = np.unique(ids, return_inverse=True)
        infos: list[WorkloadInfo | None] = []
        for gid in unique.tolist():
            row, code = divmod(gid, 2 * JOB_CAP)
            lane, job = divmod(code, JOB_CAP)
            info = workload_info(pool.specs[row], lane, job, cycle, self.config.seed) if gid >= 0 else None
            infos.append(info)
        return infos, inverse.reshape(codes.shape)
