"""connectors.nvml_windows: a time-sliced pair's NVML windows as numbers (hand-computed values)."""

from __future__ import annotations

import importlib.util
import json
import math
from importlib.machinery import SourceFileLoader
from pathlib import Path

import pytest

from connectors.nvml_windows import stretch_shares, window_split, windows_of

# pid 7 owns windows 1, 3, 4 and 6 of six; pid 9 is not of the pair; one row is seen twice.
SAMPLES = [
    (7, 1_000_000, 80, 10),
    (8, 1_200_000, 60, 10),
    (9, 1_300_000, 99, 10),
    (7, 1_400_000, 80, 10),
    (7, 1_600_000, 50, 10),
    (8, 1_800_000, 90, 10),
    (7, 2_000_000, 70, 10),
    (7, 1_000_000, 80, 10),
]


def test_window_split_counts_each_window_once_and_weighs_by_smutil() -> None:
    assert [p for _, p, _ in windows_of(SAMPLES, {7, 8})] == [7, 8, 7, 7, 8, 7]
    got = window_split(SAMPLES, 7, {7, 8})
    assert (got.windows, got.owned) == (6, 4)
    assert got.count_share == pytest.approx(2 / 3)
    assert got.sm_share == pytest.approx(280 / 430)  # 80+80+50+70 of 80+60+80+50+90+70
    assert got.binomial_se == pytest.approx(math.sqrt(1 / 27))  # (2/3)(1/3)/6
    # deviations 1/3, -2/3, 1/3, 1/3, -2/3, 1/3: products sum -7/9, over 5 pairs, over var 2/9
    assert got.lag1 == pytest.approx(-0.7)
    other = window_split(SAMPLES, 8, {7, 8})
    assert other.count_share + got.count_share == pytest.approx(1.0)
    assert other.sm_share + got.sm_share == pytest.approx(1.0)


def test_window_split_of_no_windows_or_one_owner() -> None:
    assert math.isnan(window_split([], 7, {7, 8}).count_share)
    only = window_split([(7, 1, 50, 0), (7, 2, 60, 0)], 7, {7, 8})
    assert (only.count_share, only.binomial_se) == (1.0, 0.0)
    assert math.isnan(only.lag1)  # a constant owner has no correlation


def test_stretch_shares_leaves_the_short_last_stretch_out() -> None:
    # 0.5 s stretches from 1.0 s: [1.0, 1.2, 1.4] -> 160 of 220; [1.6, 1.8] -> 50 of 140; 2.0 short
    assert stretch_shares(SAMPLES, 7, {7, 8}, 0.5) == pytest.approx([8 / 11, 5 / 14])
    assert stretch_shares([], 7, {7, 8}, 0.5) == []


def test_h200_probe_run_1_windows() -> None:
    """Probe run 1 on the H200 (tests/nvml/h200/timeslice_windows.json, docs/h200-timeslice-probe-run.txt):
    117 of 208 windows for the 71.4 % process, smUtil 9041 of 15920 (56.8 %), a binomial error
    of 3.4 points, and consecutive owners anti-correlated rather than in long runs: within the
    run the windows look like independent draws around 56 %, far from the work's 71.4 %."""
    trace = json.loads((Path(__file__).resolve().parents[1] / "nvml/h200/timeslice_windows.json").read_text())
    heavy, light = trace["pids"]
    got = window_split(trace["samples"], heavy, {heavy, light})
    assert (got.windows, got.owned) == (208, 117)
    assert got.sm_share == pytest.approx(9041 / 15920)
    assert round(got.binomial_se, 4) == 0.0344
    assert round(got.lag1, 2) == -0.21


def test_gpu_validate_ledger_notes_the_windows_beside_the_ledger_and_the_work() -> None:
    """scripts/gpu-validate-ledger's NOTE lines for the time-sliced pair, from probe run 1's windows
    and a ledger split of 57 / 43 %: the agent's draws 0.2 points from NVML's windows (56.8 % by
    smUtil), the windows 14.6 points from the work (14440 of 20218 matmuls = 71.4 %); its one whole
    40 s stretch from the first window holds 179 windows, 8247 of 13963 smUtil its (59.1 %)."""
    root = Path(__file__).resolve().parents[2]
    loader = SourceFileLoader("gv_windows", str(root / "scripts" / "gpu-validate-ledger"))
    gv = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(gv)
    trace = json.loads((root / "tests/nvml/h200/timeslice_windows.json").read_text())
    heavy, light = trace["pids"]
    recs = [
        {"name": "gl-ts-70", "pid": heavy, "mm": trace["work"]["gl-ts-70"]["mm"]},
        {"name": "gl-ts-30", "pid": light, "mm": trace["work"]["gl-ts-30"]["mm"]},
    ]
    notes = gv.windows_notes(recs, trace["samples"], {"gl-ts-70": 57.0, "gl-ts-30": 43.0}, 0.02)
    assert notes[0].startswith(
        "gl-ts-70: NVML's windows (polled every 0.02 s) 56.8 % by smUtil, 56.2 % by count (117 of 208; "
        "binomial SE ±3.4 points; consecutive owners' correlation -0.21; 40 s stretches 59.1–59.1 %)"
    )
    assert notes[0].endswith(
        "ledger 57.0 %, work 71.4 %: "
        "the agent's draws vs the windows +0.2 points, the windows vs the work -14.6 points"
    )
    assert notes[1].endswith(
        "the agent's draws vs the windows -0.2 points, the windows vs the work +14.6 points"
    )
    assert gv.windows_notes(recs, [], {"gl-ts-70": 1.0, "gl-ts-30": 1.0}, 0.02)[0] == (
        "gl-ts-70: no NVML windows recorded (0) or no work/busy"
    )


def test_gpu_validate_ledger_windows_probe_keeps_each_window_once() -> None:
    """The script's WindowsProbe asks NVML for windows newer than the newest it saw, keeps each
    (pid, timeStamp) once and counts a refused read (NVML's NotFound when no window is new)."""
    root = Path(__file__).resolve().parents[2]
    loader = SourceFileLoader("gv_probe", str(root / "scripts" / "gpu-validate-ledger"))
    gv = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(gv)

    class Sample:
        def __init__(self, pid: int, ts: int, sm: int) -> None:
            self.pid, self.timeStamp, self.smUtil, self.memUtil = pid, ts, sm, 5

    reads = [
        [Sample(7, 100, 70), Sample(8, 300, 60)],
        [Sample(7, 300, 70)],  # NVML would not repeat a window; the probe keeps it once anyway
        None,  # nothing new: NotFound
        [Sample(7, 500, 80)],
    ]
    asked: list[int] = []

    class Nvml:
        def nvmlDeviceGetProcessUtilization(self, handle: object, since: int) -> list[Sample]:
            asked.append(since)
            got = reads[len(asked) - 1]
            if len(asked) == len(reads):
                probe.stop_event.set()
            if got is None:
                raise RuntimeError("NVML_ERROR_NOT_FOUND")
            return got

    probe = gv.WindowsProbe(Nvml(), "h", 0.0)
    probe.run()
    assert asked == [0, 300, 300, 300]
    assert probe.rows() == [[7, 100, 70, 5], [8, 300, 60, 5], [7, 300, 70, 5], [7, 500, 80, 5]]
    assert probe.errors == 1
