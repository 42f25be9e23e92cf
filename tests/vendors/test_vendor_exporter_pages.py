"""The recorded Intel and Ascend exporter pages → exact samples, through the same path a direct scrape
takes (``dcgm_scrape.parse_metrics`` with the vendor's profile); and what hostile pages give.

Hand-computed values: tests/fixtures/xpum/README.md and tests/fixtures/ascend/README.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from connectors import exporter_profiles, npu_exporter, xpum_exporter
from connectors.dcgm_scrape import parse_metrics
from connectors.exporter_profile import Series, Stamp
from connectors.sdk import SampleBatch
from connectors.vendor_names import ascend_model, intel_model

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MIB = 1024 * 1024
GPU_A, GPU_B = "00000000-0000-0029-0000-002f0bd58086", "00000000-0000-009a-0000-002f0bd58086"
CHIP_0, CHIP_1 = (
    "7C0D3A04-2C204A14-B5100C80-50C61CD1-32C70000",
    "7C0D3A04-2C204A14-B5100C80-50C61CD1-32C70001",
)
TS = 1_764_421_200_000


def readings(batch: SampleBatch) -> dict[tuple[str, str], tuple[float, str]]:
    """(device, metric) → (value, workload key); one row each (asserted)."""
    frame = batch.samples.with_columns(pl.col(pl.Categorical).cast(pl.String))
    assert frame.select("device_id", "metric").is_duplicated().sum() == 0
    return {
        (r["device_id"], r["metric"]): (r["value"], r["workload_key"]) for r in frame.iter_rows(named=True)
    }


def test_the_xpu_manager_page_gives_each_gpu_once_with_tiles_folded() -> None:
    text = (FIXTURES / "xpum/max1550-node.prom").read_text()
    assert not text.endswith("\n")  # as the exporter serves it
    batch = parse_metrics(text, TS, Stamp(), exporter_profiles.profile("xpum"))
    got = readings(batch)
    train = "k8s:ml/train-xe-0/trainer"
    expected = {
        (GPU_A, "gpu_util"): (90.0, train),
        (GPU_A, "sm_active"): (60.0, train),
        (GPU_A, "mem_bw"): (35.0, train),  # the device line (avg of tiles) wins over the tiles
        (GPU_A, "power_w"): (480.5, train),
        (GPU_A, "energy_j"): (3_600_000.0, train),
        (GPU_A, "mem_used_b"): (66_571_993_088.0, train),
        (GPU_A, "temp_c"): (61.0, train),  # location="mem" (55) is not the GPU's
        (GPU_B, "gpu_util"): (0.0, ""),
        (GPU_B, "sm_active"): (0.05, ""),
        (GPU_B, "mem_bw"): (0.0, ""),
        (GPU_B, "power_w"): (195.25, ""),
        (GPU_B, "energy_j"): (1_200_000.0, ""),
        (GPU_B, "mem_used_b"): (3_221_225_472.0, ""),
        (GPU_B, "temp_c"): (41.0, ""),
    }
    assert got.keys() == expected.keys()
    for key, (value, workload) in expected.items():
        assert got[key] == (pytest.approx(value, abs=1e-9), workload), key
    assert batch.samples["ts_ms"].unique().to_list() == [TS]
    assert {d.device_id: (d.gpu_model, d.node, d.vendor) for d in batch.devices} == {
        GPU_A: ("Intel Data Center GPU Max 1550", "xe-node-01", "intel"),
        GPU_B: ("Intel Data Center GPU Max 1550", "xe-node-01", "intel"),
    }
    facts = {"k8s.namespace": "ml", "k8s.pod": "train-xe-0", "k8s.container": "trainer"}
    assert [(w.workload_key, w.namespace, w.workload, w.facts) for w in batch.workloads] == [
        (train, "ml", "train-xe-0", facts)
    ]


def test_the_npu_exporter_page_gives_each_chip_with_its_pod_and_own_timestamp() -> None:
    batch = parse_metrics((FIXTURES / "ascend/910b3-node.prom").read_text(), 0, Stamp(), npu_exporter.PROFILE)
    got = readings(batch)
    pod = "k8s:llm/pretrain-0/worker"
    expected = {
        (CHIP_0, "gpu_util"): (92.0, pod),
        (CHIP_0, "sm_active"): (87.0, pod),
        (CHIP_0, "tensor_active"): (80.0, pod),
        (CHIP_0, "mem_bw"): (44.0, pod),
        (CHIP_0, "power_w"): (352.6, pod),
        (CHIP_0, "temp_c"): (57.0, pod),
        (CHIP_0, "mem_used_b"): (52314.0 * MIB, pod),
        (CHIP_0, "mem_total_b"): (65536.0 * MIB, pod),
        (CHIP_1, "gpu_util"): (0.0, ""),
        (CHIP_1, "sm_active"): (0.0, ""),
        (CHIP_1, "tensor_active"): (0.0, ""),
        (CHIP_1, "mem_bw"): (0.0, ""),
        (CHIP_1, "power_w"): (96.9, ""),
        (CHIP_1, "temp_c"): (36.0, ""),
        (CHIP_1, "mem_used_b"): (3403.0 * MIB, ""),
        (CHIP_1, "mem_total_b"): (65536.0 * MIB, ""),
    }
    assert got == {k: (pytest.approx(v, abs=1e-9), w) for k, (v, w) in expected.items()}
    assert batch.samples["ts_ms"].unique().to_list() == [TS]  # the exporter's collection time
    assert sorted((d.device_id, d.gpu_model, d.gpu_index, d.vendor) for d in batch.devices) == [
        (CHIP_0, "Ascend 910B3", 0, "huawei"),
        (CHIP_1, "Ascend 910B3", 1, "huawei"),
    ]
    facts = {"k8s.namespace": "llm", "k8s.pod": "pretrain-0", "k8s.container": "worker"}
    assert [(w.workload_key, w.namespace, w.workload, w.facts) for w in batch.workloads] == [
        (pod, "llm", "pretrain-0", facts)
    ]


def _s(name: str, labels: dict[str, str], *values: float) -> Series:
    return Series(
        name, labels, np.arange(len(values), dtype=np.int64) * 15_000, np.array(values, dtype=float)
    )


def test_ascend_fallbacks_overall_from_ai_core_ddr_memory_and_a_chip_without_vdie() -> None:
    # A 310P card: no overall utilization, no HBM; the v5 exporter left vdie_id empty.
    labels = {"id": "3", "model_name": "310P3-Ascend-V1", "vdie_id": "", "instance": "10.0.0.9:8082"}
    batch = npu_exporter.to_batch(
        [
            _s("npu_chip_info_utilization", labels, 40.0, 60.0),
            _s("npu_chip_info_used_memory", labels, 1560.0, 1560.0),
            _s("npu_chip_info_total_memory", labels, 44280.0, 44280.0),
        ],
        Stamp(node="edge-7"),
    )
    frame = batch.samples.with_columns(pl.col(pl.Categorical).cast(pl.String)).sort("metric", "ts_ms")
    assert frame.select("device_id").unique().item() == "edge-7/npu3"
    assert frame.filter(pl.col("metric") == "gpu_util")["value"].to_list() == [40.0, 60.0]
    assert frame.filter(pl.col("metric") == "sm_active")["value"].to_list() == [40.0, 60.0]
    assert frame.filter(pl.col("metric") == "mem_used_b")["value"].to_list() == [1560.0 * MIB] * 2
    assert frame.filter(pl.col("metric") == "mem_total_b")["value"].to_list() == [44280.0 * MIB] * 2
    assert batch.devices[0].gpu_model == "Ascend 310P3"


def test_ascend_several_pods_on_one_chip_are_held_but_by_no_single_pod() -> None:
    labels = {
        "id": "0",
        "vdie_id": "V0",
        "pod_name": npu_exporter.MULTI_POD,
        "namespace": npu_exporter.MULTI_POD,
    }
    batch = npu_exporter.to_batch([_s("npu_chip_info_utilization", labels, 50.0)], Stamp())
    assert [w.workload_key for w in batch.workloads] == ["k8s:multiple-pods/V0"]
    # honor_labels: false renames the exporter's namespace; the exporter's own one wins
    moved = {"id": "0", "vdie_id": "V0", "pod_name": "p", "container_name": "c",
             "exported_namespace": "team-a", "namespace": "monitoring"}  # fmt: skip
    batch = npu_exporter.to_batch([_s("npu_chip_info_utilization", moved, 50.0)], Stamp())
    assert [w.workload_key for w in batch.workloads] == ["k8s:team-a/p/c"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, -0.5])
def test_failed_or_impossible_readings_are_gaps_never_zeros(bad: float) -> None:
    xe = {"uuid": "X", "sub_dev": "0"}
    batch = xpum_exporter.to_batch(
        [_s("xpum_eu_active_ratio", xe, 0.5, bad, 0.25), _s("xpum_power_watts", {"uuid": "X"}, bad)], Stamp()
    )
    frame = batch.samples.with_columns(pl.col(pl.Categorical).cast(pl.String))
    assert frame.sort("ts_ms")[["metric", "ts_ms", "value"]].rows() == [
        ("sm_active", 0, 50.0),
        ("sm_active", 30_000, 25.0),
    ]
    chip = {"id": "0", "vdie_id": "V0"}
    batch = npu_exporter.to_batch(
        [_s("npu_chip_info_power", chip, bad), _s("npu_chip_info_temperature", chip, 50.0)], Stamp()
    )
    assert batch.samples["metric"].cast(pl.String).to_list() == ["temp_c"]


def test_pages_with_nothing_of_the_vendors_give_empty_batches_not_errors() -> None:
    for profile in (xpum_exporter.PROFILE, npu_exporter.PROFILE):
        assert parse_metrics("", 0, Stamp(), profile).samples.height == 0
        other = 'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-1"} 50\nxpum_power_watts{card="1",src="sum"} 5\n'
        batch = parse_metrics(other, 0, Stamp(), profile)
        assert batch.samples.height == 0 and batch.devices == []
    # an XPU Manager series without a uuid (a card line), an Ascend one without id/vdie/node
    assert xpum_exporter.to_batch([_s("xpum_power_watts", {"card": "1"}, 5.0)], Stamp()).devices == []
    assert npu_exporter.to_batch([_s("npu_chip_info_power", {"model_name": "x"}, 5.0)], Stamp()).devices == []
    long_id = "u" * 201  # longer than the ledger's device_id column: not a device
    assert xpum_exporter.to_batch([_s("xpum_power_watts", {"uuid": long_id}, 5.0)], Stamp()).devices == []
    assert (
        npu_exporter.to_batch([_s("npu_chip_info_power", {"vdie_id": long_id}, 5.0)], Stamp()).devices == []
    )


def test_hostile_label_values_stay_bounded_names() -> None:
    huge = "x" * 10_000
    assert intel_model(huge) == "x" * 100
    assert ascend_model(huge) == "x" * 100
    assert (
        ascend_model("910B3-Ascend-V1")
        == ascend_model("Ascend910B3")
        == ascend_model("910B3")
        == "Ascend 910B3"
    )
    assert intel_model("Intel(R) Data Center GPU Max 1550") == "Intel Data Center GPU Max 1550"
    assert intel_model("Intel(R) Graphics [0x56c0]") == "Intel Data Center GPU Flex 170"
    assert intel_model("Intel(R) Graphics [0x1234]") == "Intel Graphics [0x1234]"  # unknown: as named
    assert intel_model(None, "0xbda") == "Intel Data Center GPU Max 1100"
    assert intel_model(None) is None and ascend_model("") is None


def test_the_xpu_manager_2_page_gives_the_gpu_from_its_package_and_compute_group() -> None:
    """tests/fixtures/xpum/xpumd-node.prom: one Max 1550 as xpumd's collector exposes it."""
    page = (FIXTURES / "xpum/xpumd-node.prom").read_text()
    batch = parse_metrics(page, TS, Stamp(node="xe-node-02"), exporter_profiles.profile("xpumd"))
    assert readings(batch) == {
        (GPU_A, "gpu_util"): (pytest.approx(90.0), ""),  # compute-all tiles 95 %, 85 %; not 'all'
        (GPU_A, "mem_bw"): (pytest.approx(35.0), ""),
        (GPU_A, "power_w"): (480.5, ""),  # the package domain; card (520) and stack (240.25) are not
        (GPU_A, "energy_j"): (3_600_000.0, ""),
        (GPU_A, "mem_used_b"): (66_571_993_088.0, ""),  # both tiles' HBM modules
        (GPU_A, "mem_total_b"): (137_438_953_472.0, ""),
        (GPU_A, "temp_c"): (61.0, ""),  # the GPU sensor's max; global 62 and memory 55 are not
    }
    assert [(d.device_id, d.gpu_model, d.vendor, d.node) for d in batch.devices] == [
        (GPU_A, "Intel Data Center GPU Max 1550", "intel", "xe-node-02")
    ]
    only_all = "\n".join(line for line in page.splitlines() if "compute-all" not in line)
    batch = parse_metrics(only_all, TS, Stamp(), exporter_profiles.profile("xpumd"))
    assert readings(batch)[(GPU_A, "gpu_util")] == (pytest.approx(93.5), "")  # 'all': (97 + 90) / 2
