"""AMD's device-metrics-exporter read through the ``amd`` exporter profile: a recorded ``/metrics``
page (tests/fixtures/amd/device-metrics-exporter.prom, the exporter's own names, HELP texts and
mandatory labels) to exact samples, partitions, and what the profile refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from connectors import exporter_profiles
from connectors.dcgm_scrape import parse_metrics
from connectors.exporter_profile import Series, Stamp
from connectors.prometheus import PrometheusConfig
from connectors.rocm_exporter import PROFILE, model_name, to_batch

PAGE = Path(__file__).resolve().parents[1] / "fixtures" / "amd" / "device-metrics-exporter.prom"
MIB = 1024 * 1024
TS = 1_764_669_600_000  # 2025-12-02T10:00:00Z
G0, G1, G2 = "692251001124", "692251001125", "692251001126"
STAMP = Stamp(region="dc2", exporter_pod_pattern=PROFILE.exporter_pod_pattern)


def _values(frame: pl.DataFrame) -> dict[tuple[str, str], tuple[float, str, float]]:
    return {
        (r["device_id"], r["metric"]): (r["value"], r["workload_key"], r["share"])
        for r in frame.with_columns(pl.col(pl.Categorical).cast(pl.String)).iter_rows(named=True)
    }


def test_the_recorded_page_gives_exact_samples_in_ledger_units() -> None:
    batch = parse_metrics(PAGE.read_text(), TS, STAMP, PROFILE)
    got = _values(batch.samples)
    train, job = "k8s:llm/train-7/trainer", "slurm:4242"
    # hand-computed from the page: MB are MiB, µJ ÷ 10⁶, gpu_power_usage wins over the package power,
    # the profiler's busy percentages × GUI utilization / 100
    assert got == {
        (G0, "gpu_util"): (87.0, train, 1.0), (G0, "mem_bw"): (41.0, train, 1.0),
        (G0, "power_w"): (612.0, train, 1.0), (G0, "energy_j"): (1_234_567.890123, train, 1.0),
        (G0, "mem_used_b"): (150_000.0 * MIB, train, 1.0), (G0, "mem_total_b"): (196_592.0 * MIB, train, 1.0),
        (G0, "temp_c"): (71.0, train, 1.0), (G0, "sm_active"): (72.0, train, 1.0),
        (G0, "tensor_active"): (45.0, train, 1.0),
        (G1, "gpu_util"): (0.0, "", 1.0), (G1, "mem_bw"): (0.0, "", 1.0), (G1, "power_w"): (130.0, "", 1.0),
        (G1, "energy_j"): (987_654.321, "", 1.0), (G1, "mem_used_b"): (283.0 * MIB, "", 1.0),
        (G1, "mem_total_b"): (196_592.0 * MIB, "", 1.0), (G1, "temp_c"): (40.0, "", 1.0),
        (G1, "sm_active"): (0.0, "", 1.0), (G1, "tensor_active"): (0.0, "", 1.0),
        (G2, "gpu_util"): (52.0, job, 1.0), (G2, "mem_bw"): (20.0, job, 1.0),
        (G2, "power_w"): (450.0, job, 1.0),
        (G2, "energy_j"): (550_000.0, job, 1.0), (G2, "mem_used_b"): (98_304.0 * MIB, job, 1.0),
        (G2, "mem_total_b"): (196_592.0 * MIB, job, 1.0), (G2, "temp_c"): (63.0, job, 1.0),
        (G2, "sm_active"): (24.0, job, 1.0), (G2, "tensor_active"): (15.0, job, 1.0),
    }  # fmt: skip
    assert set(batch.samples["ts_ms"].to_list()) == {TS}
    devices = {d.device_id: d for d in batch.devices}
    assert set(devices) == {G0, G1, G2}
    d0 = devices[G0]
    assert (d0.vendor, d0.gpu_model, d0.node, d0.gpu_index, d0.region) == (
        "amd", "AMD Instinct MI300X", "mi300-node-01", 0, "dc2"
    )  # fmt: skip
    assert d0.parent_device_id is None and d0.gpu_fraction == 1.0
    work = {w.workload_key: w for w in batch.workloads}
    assert set(work) == {train, job}
    assert (work[train].namespace, work[train].workload) == ("llm", "train-7")
    assert dict(work[train].facts) == {
        "k8s.namespace": "llm",
        "k8s.pod": "train-7",
        "k8s.container": "trainer",
    }
    assert work[job].user_name == "alice"
    assert dict(work[job].facts) == {"slurm.job": "4242", "slurm.user": "alice", "slurm.partition": "gpu"}


def _series(name: str, value: float, **labels: str) -> Series:
    return Series(name, labels, np.array([TS], np.int64), np.array([value]))


def _gpu(partition: str, **extra: str) -> dict[str, str]:
    return {"card_model": "MI300X", "serial_number": "S1", "gpu_id": str(int(partition) + 8),
            "hostname": "n1", "gpu_compute_partition_type": "cpx", "gpu_partition_id": partition,
            "pod": "", **extra}  # fmt: skip


def test_a_cpx_gpu_is_eight_devices_sharing_the_first_partitions_activity_and_power() -> None:
    series = []
    for p in range(8):
        primary = p == 0  # the physical sensors are read once: partition 0; the others report 0
        series += [
            _series("gpu_gfx_activity", 64.0 if primary else 0.0, **_gpu(str(p))),
            _series("gpu_power_usage", 720.0 if primary else 0.0, **_gpu(str(p))),
            _series("gpu_used_vram", 1000.0 * (p + 1), **_gpu(str(p))),
        ]
        if primary:
            series.append(_series("gpu_energy_consumed", 8e12, **_gpu("0")))
    series.append(_series("gpu_gfx_activity", 50.0, **_gpu("9", gpu_compute_partition_type="")))
    batch = to_batch(series, STAMP)
    got = _values(batch.samples)
    for p in range(8):
        device = f"S1/p{p}"
        assert got[(device, "gpu_util")] == (64.0, "", 1.0), p  # the whole GPU's, as amdsmi reads it
        assert got[(device, "power_w")] == (90.0, "", 1.0), p  # 720 W / 8
        assert got[(device, "energy_j")] == (1_000_000.0, "", 1.0), p  # 8e12 µJ / 8
        assert got[(device, "mem_used_b")] == (1000.0 * (p + 1) * MIB, "", 1.0), p  # its own
    devices = {d.device_id: d for d in batch.devices}
    assert devices["S1/p3"].parent_device_id == "S1" and devices["S1/p3"].gpu_fraction == 1 / 8
    assert devices["S1/p3"].mig_profile == "cpx"
    assert devices["S1"].gpu_fraction == 1.0  # an unpartitioned label set is the physical GPU
    assert len(batch.samples) == 8 * 4 + 1


def test_labels_naming_no_device_and_unreadable_values_are_skipped_not_guessed() -> None:
    batch = to_batch(
        [
            _series("gpu_gfx_activity", 10.0, card_model="MI300X"),  # no serial, uuid, host or index
            _series("gpu_gfx_activity", float("nan"), serial_number="S2", hostname="n"),
            _series(
                "gpu_power_usage", 100.0, serial_number="S2", hostname="n", pod="amdgpu-metrics-exporter-x1"
            ),
            _series("gpu_clock", 2100.0, serial_number="S2", hostname="n"),  # not a ledger field
        ],
        STAMP,
    )
    assert _values(batch.samples) == {("S2", "power_w"): (100.0, "", 1.0)}  # the exporter's own pod is nobody
    assert batch.workloads == []
    assert model_name("102-D65208-0C") == "102-D65208-0C"  # a board part number stays as written
    assert model_name("MI250X") == "AMD Instinct MI250X"


def test_the_amd_profile_is_registered_with_a_prefix_and_its_own_exporter_pod() -> None:
    config = PrometheusConfig(name="p", url="http://p", exporter="amd", metric_prefix="amd_")
    profile = config.exporter_profile()
    assert profile.vendor == "amd" and profile is not PROFILE
    assert profile.field_of("amd_gpu_gfx_activity") == "gpu_gfx_activity"
    assert profile.field_of("gpu_gfx_activity") is None
    assert profile.field_of("AMD_GPU_GFX_ACTIVITY") is None  # AMD's names are matched as written
    assert config.stamp().exporter_pod_pattern == "metrics-exporter"
    assert "amd" in exporter_profiles.names()
    with pytest.raises(ValueError, match="unknown exporter profile"):
        exporter_profiles.profile("rocm-smi")


def test_hostile_labels_are_skipped_not_truncated_into_another_device() -> None:
    batch = to_batch(
        [
            _series("gpu_power_usage", 100.0, serial_number="S" * 10_000, hostname="n"),
            _series("gpu_power_usage", 200.0, serial_number="S3", hostname="n" * 300),
            _series(
                "gpu_power_usage", 300.0, serial_number="S4", hostname="n", pod="p" * 1000, namespace="ns"
            ),
            _series("gpu_power_usage", 400.0, serial_number="S5", hostname="n", card_model="M" * 101),
            _series("gpu_power_usage", 500.0, serial_number="S6", hostname="n", pod="ok", namespace="ns"),
        ],
        STAMP,
    )
    assert _values(batch.samples) == {("S6", "power_w"): (500.0, "k8s:ns/ok/", 1.0)}
    assert [d.device_id for d in batch.devices] == ["S6"]
