"""What NVML's per-process windows say about a time-sliced GPU, as numbers (docs/virtual-gpus.md).

The driver credits each ~200 ms sampling window to ONE process (measured on the H200), so the
only per-process signal NVML has for time-sliced processes is which windows each one owns. The
agent draws those windows (``connectors.nvml_procs.ShareTracker``); this module summarises a
recorded set of them — every window, polled faster than the driver samples — so that a
validation run can tell the agent's draws apart from NVML's own split, and that split from the
work: the share each process got of the windows (by count and by summed smUtil, which is what
the agent's draws weigh by), the binomial standard error that share would have if windows were
independent draws, the correlation of consecutive windows' owners, and the share in stretches
of a given length (NVML's split wanders between stretches far more than the binomial error
allows: docs/virtual-gpus.md).

Samples are ``(pid, timeStamp µs, smUtil, memUtil)`` rows as ``scripts/gpu-timeslice-probe`` and
``scripts/gpu-validate-ledger`` record them; a ``(pid, timeStamp)`` seen twice counts once.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class WindowSplit:
    """One process's part of the windows credited to a set of processes."""

    windows: int  # windows credited to any of the processes
    owned: int  # of them, this process's
    count_share: float  # owned / windows
    sm_share: float  # this process's summed smUtil / all windows' (the agent's draws weigh so)
    binomial_se: float  # sqrt(p (1 - p) / n) of count_share, were windows independent draws
    lag1: float  # correlation of consecutive windows' owners (this process or not); nan if constant


def windows_of(samples: Iterable[Sequence[int]], pids: Collection[int]) -> list[tuple[int, int, int]]:
    """``(timeStamp, pid, smUtil)`` of each distinct window credited to one of ``pids``, oldest
    first."""
    seen: dict[tuple[int, int], int] = {}
    for row in samples:
        pid, ts, sm = int(row[0]), int(row[1]), int(row[2])
        if pid in pids:
            seen[(pid, ts)] = sm
    return sorted((ts, pid, sm) for (pid, ts), sm in seen.items())


def window_split(samples: Iterable[Sequence[int]], pid: int, pids: Collection[int]) -> WindowSplit:
    """``pid``'s part of the windows credited to any of ``pids`` (which holds ``pid``)."""
    windows = windows_of(samples, pids)
    n = len(windows)
    owned = [1.0 if p == pid else 0.0 for _, p, _ in windows]
    k = int(sum(owned))
    p = k / n if n else math.nan
    sm_all = sum(sm for _, _, sm in windows)
    sm_own = sum(sm for _, p_, sm in windows if p_ == pid)
    se = math.sqrt(p * (1 - p) / n) if n else math.nan
    return WindowSplit(
        windows=n,
        owned=k,
        count_share=p,
        sm_share=sm_own / sm_all if sm_all else math.nan,
        binomial_se=se,
        lag1=_lag1(owned, p),
    )


def _lag1(x: list[float], mean: float) -> float:
    """The lag-1 autocorrelation of ``x`` (the product-moment estimate about its mean)."""
    n = len(x)
    var = sum((v - mean) ** 2 for v in x) / n if n else 0.0
    if n < 2 or var == 0:
        return math.nan
    return sum((x[i] - mean) * (x[i + 1] - mean) for i in range(n - 1)) / (n - 1) / var


def stretch_shares(
    samples: Iterable[Sequence[int]], pid: int, pids: Collection[int], seconds: float
) -> list[float]:
    """``pid``'s smUtil share of the windows in each whole stretch of ``seconds`` from the first
    window on (a last, shorter stretch is left out; a stretch without windows gives nothing)."""
    windows = windows_of(samples, pids)
    if not windows:
        return []
    t0, span_us = windows[0][0], seconds * 1e6
    whole = int((windows[-1][0] - t0) // span_us)
    own = [0.0] * whole
    total = [0.0] * whole
    for ts, p, sm in windows:
        i = int((ts - t0) // span_us)
        if i < whole:
            total[i] += sm
            if p == pid:
                own[i] += sm
    return [o / t for o, t in zip(own, total, strict=True) if t > 0]
