"""OpenMetrics of ``DCGM_FI_DEV_GPU_UTIL`` for N GPUs over D days at P-second steps (sorted per series).

A copy of the generator issue 13's Prometheus comparison was measured with, kept here so that
this repository stands alone; the values, labels and layout are that
script's, byte for byte: a deterministic mix of busy, idle and launch-bound GPUs, labels ``gpu``,
``UUID``, ``Hostname``, ``modelName``, data from 2024-10-01T00:00:00Z.

    python bench/gen_dcgm_om.py N DAYS PERIOD OUT
"""

from __future__ import annotations

import sys

import numpy as np

T0 = 1727740800  # 2024-10-01T00:00:00Z


def utilization(g: int, days: int, period: int) -> tuple[np.ndarray, np.ndarray]:
    """GPU ``g``'s scrape times (s) and utilization (%)."""
    steps = days * 86400 // period
    ts = T0 + np.arange(steps, dtype=np.int64) * period
    hour = (ts - T0) // 3600
    rng = np.random.default_rng(g)
    busy_hours = rng.random(days * 24) < (0.2 + 0.7 * (g % 10) / 10)
    base = np.where(busy_hours[hour], 70 + (g % 30), 0)
    vals = np.clip(base + rng.integers(-5, 6, steps), 0, 100)
    return ts, vals


def write(n: int, days: int, period: int, out: str) -> None:
    with open(out, "w") as f:
        f.write("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n")
        for g in range(n):
            ts, vals = utilization(g, days, period)
            prefix = (
                f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g % 8}",UUID="GPU-{g:08d}",Hostname="node-{g // 8:04d}",'
                f'modelName="NVIDIA H100 80GB HBM3"}} '
            )
            lines = np.char.add(np.char.add(prefix, vals.astype(str)), np.char.add(" ", ts.astype(str)))
            f.write("\n".join(lines.tolist()))
            f.write("\n")
        f.write("# EOF\n")


if __name__ == "__main__":
    write(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
