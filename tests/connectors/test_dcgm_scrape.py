"""dcgm-exporter ``/metrics`` text → samples, on the three shared fixtures (fixtures/README.md checks)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from prom.httpstub import Reply, http_stub

from connectors.base import MetricsConnector
from connectors.dcgm import Series, Stamp, mig_fraction, to_batch
from connectors.dcgm_scrape import DcgmScrapeConfig, DcgmScrapeConnector, parse_metrics

# tests/fixtures/dcgm (tests/fixtures/README.md describes them).
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"
MIB = 1024 * 1024
TS = 1_758_362_400_000


def _parse(name: str, stamp: Stamp | None = None) -> tuple[pl.DataFrame, dict]:
    batch = parse_metrics((FIXTURES / name).read_text(), TS, stamp or Stamp())
    assert batch.samples["ts_ms"].unique().to_list() == [TS]
    return batch.samples, {d.device_id: d for d in batch.devices}


def _value(samples: pl.DataFrame, device: str, metric: str) -> float:
    return samples.filter((pl.col("device_id") == device) & (pl.col("metric") == metric))["value"].item()


def test_plain_dgx_h100() -> None:
    samples, devices = _parse("onprem_dgx_h100_plain.prom")
    assert len(devices) == 8 and all(d.startswith("GPU-") for d in devices)
    by_index = {d.gpu_index: d for d in devices.values()}
    assert {d.node for d in devices.values()} == {"dgx-h100-017"}  # Hostname (pre-#655) on bare metal
    assert {d.gpu_model for d in devices.values()} == {"NVIDIA H100 80GB HBM3"}
    for i in range(8):  # FB free + used + reserved = 81,559 MiB per GPU
        assert _value(samples, by_index[i].device_id, "mem_total_b") == 81_559 * MIB
    for i in (4, 5):  # idle: util 0, nothing in memory
        assert _value(samples, by_index[i].device_id, "gpu_util") == 0.0
        assert _value(samples, by_index[i].device_id, "mem_used_b") == 0.0
    gpu0 = by_index[0].device_id
    assert _value(samples, gpu0, "gpu_util") == 97.0  # integer %
    assert _value(samples, gpu0, "power_w") == 611.881324  # W as printed
    assert _value(samples, gpu0, "energy_j") == 414_699_252.753  # mJ → J
    assert _value(samples, gpu0, "mem_used_b") == 71_323 * MIB
    assert _value(samples, gpu0, "tensor_active") == pytest.approx(48.7917)  # ratio 0.487917 → %
    assert _value(samples, gpu0, "mem_bw") == pytest.approx(29.885)
    pct = samples.filter(pl.col("metric").is_in(["gpu_util", "tensor_active", "mem_bw"]))["value"]
    assert pct.min() >= 0 and pct.max() <= 100
    assert "sm_active" not in samples["metric"].to_list()  # not in the default counters
    assert (samples["workload_key"] == "").all()


def test_a100_mig() -> None:
    samples, devices = _parse("onprem_a100_mig.prom")
    parent, full = "GPU-e46dfc84-39c3-20af-f034-e5ab74cc40d9", "GPU-58b4fa9d-db7c-d373-05a5-c10dd9a0277b"
    gis = {gi: f"MIG-{parent}-{gi}" for gi in (2, 3, 9, 10)}
    assert set(devices) == {full, *gis.values()}  # the MIG-mode GPU is not a device itself
    profiles = {gi: devices[d].mig_profile for gi, d in gis.items()}
    assert profiles == {2: "3g.40gb", 3: "2g.20gb", 9: "1g.10gb", 10: "1g.10gb"}
    assert {devices[d].parent_device_id for d in gis.values()} == {parent}
    assert [devices[gis[gi]].gpu_fraction * 7 for gi in (2, 3, 9, 10)] == pytest.approx([3, 2, 1, 1])
    assert sum(devices[d].gpu_fraction for d in gis.values()) == pytest.approx(1.0)  # 7/7
    # GPU_UTIL reads 0 under MIG: an instance's util is GR_ENGINE_ACTIVE.
    assert _value(samples, gis[2], "gpu_util") == pytest.approx(77.2314)
    assert _value(samples, gis[9], "gpu_util") == 0.0  # GI 9 idle
    assert _value(samples, gis[9], "mem_used_b") == 0.0
    assert _value(samples, gis[2], "mem_total_b") == (9486 + 30706) * MIB
    # The parent's power splits by slices (468.797497 W × 3/7 …) and adds up again; temp is shared.
    assert _value(samples, gis[2], "power_w") == pytest.approx(468.797497 * 3 / 7)
    power = samples.filter(
        pl.col("metric") == "power_w", pl.col("device_id").cast(pl.String).str.starts_with("MIG-")
    )
    assert power["value"].sum() == pytest.approx(468.797497)
    energy = samples.filter(
        pl.col("metric") == "energy_j", pl.col("device_id").cast(pl.String).str.starts_with("MIG-")
    )
    assert energy["value"].sum() == pytest.approx(414_920_642.638)
    assert _value(samples, gis[10], "temp_c") == 53.0
    assert _value(samples, full, "gpu_util") == 55.0  # a full GPU keeps DEV_GPU_UTIL
    assert _value(samples, full, "mem_total_b") == (39066 + 42393 + 461) * MIB


def test_k8s_pod_labels_and_hostname() -> None:
    samples, devices = _parse("k8s_aks_h100_pod_labels.prom")
    by_index = {d.gpu_index: d.device_id for d in devices.values()}
    workload = {
        i: samples.filter(pl.col("device_id") == by_index[i])["workload_key"].unique().to_list()
        for i in range(8)
    }
    for i in range(4):
        assert workload[i] == ["k8s:llm-train/pretrain-70b-worker-0/trainer"]
    for i in (4, 5):
        assert workload[i] == ["k8s:inference/chat-serving-6d9f7c8b5-qx2lm/vllm"]
    assert workload[6] == workload[7] == [""]  # no pod labels: unallocated
    # `hostname` names the exporter pod here (an exporter without NODE_NAME): not a node…
    assert {d.node for d in devices.values()} == {None}
    assert "sm_active" in samples["metric"].to_list()  # the custom CSV enables SM_ACTIVE
    # …and the agent's configured node wins.
    _, named = _parse("k8s_aks_h100_pod_labels.prom", Stamp(node="aks-ndh100-38117625-vmss000000"))
    assert {d.node for d in named.values()} == {"aks-ndh100-38117625-vmss000000"}


def test_old_label_names_node_labels_and_mig_uuid() -> None:
    text = (
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",uuid="GPU-1",modelName="NVIDIA A30",hostname="exp-pod",'
        'kubernetes_node="node-9",pod_name="p",pod_namespace="ns",container_name="c",'
        'label_project="proj",label_team="team"} 42\n'
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",uuid="GPU-2",modelName="NVIDIA A30",GPU_I_ID="3",'
        'GPU_I_PROFILE="1g.6gb",dra_mig_device_uuid="MIG-real-uuid",hpc_job="1234"} 0.5\n'
    )
    batch = parse_metrics(text, TS, Stamp(environment="aws", region="r", cluster="k"))
    devices = {d.device_id: d for d in batch.devices}
    assert devices["GPU-1"].node == "node-9" and devices["GPU-1"].environment == "aws"
    assert devices["MIG-real-uuid"].gpu_fraction == 0.25  # A30: 4 slices
    assert {w.workload_key: (w.project, w.team, w.namespace, w.workload) for w in batch.workloads} == {
        "k8s:ns/p/c": ("proj", "team", "ns", "p"),
        "hpc:1234": (None, None, None, "1234"),
    }
    assert batch.samples.sort("device_id")["value"].to_list() == [42.0, 50.0]
    assert mig_fraction("7g.80gb", "NVIDIA H100 80GB HBM3") == 1.0
    assert mig_fraction(None, None) == 1.0


def test_scrape_over_http_is_a_reading_now() -> None:
    now = dt.datetime(2026, 11, 30, 12, 0, 7, tzinfo=dt.UTC)
    with http_stub() as stub:
        stub.default = Reply(body=(FIXTURES / "onprem_a100_mig.prom").read_text())
        config = DcgmScrapeConfig(name="agent", url=f"{stub.url}/metrics", interval_s=10, node="hpc-a100-03")
        with DcgmScrapeConnector(config, clock=lambda: now) as connector:
            assert isinstance(connector, MetricsConnector)
            assert connector.sampling.max_gap_s == 20.0
            batch = connector.scrape()
            assert batch.samples["ts_ms"].unique().to_list() == [int(now.timestamp() * 1000)]
            assert len(connector.discover()) == 5
            hour = dt.timedelta(hours=1)
            assert len(list(connector.collect(now - hour, now + hour))) == 1
            assert list(connector.collect(now - 2 * hour, now - hour)) == []  # no history
        assert [path for path, _ in stub.requests] == ["/metrics"] * 3


def test_a_gpu_entering_mig_mode_mid_window() -> None:
    """A GPU is in MIG mode at the times its instances report: before, it is a device of its own."""

    def series(field: str, ts: list[int], values: list[float], **labels: str) -> Series:
        return Series(field, {"UUID": "GPU-x", **labels}, np.array(ts), np.array(values))

    gi = {"GPU_I_ID": "5", "GPU_I_PROFILE": "2g.20gb"}
    batch = to_batch(
        [
            series("DCGM_FI_DEV_GPU_UTIL", [1000, 2000], [50, 0]),
            series("DCGM_FI_DEV_POWER_USAGE", [1000, 2000], [350.0, 700.0]),
            series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", [2000], [0.25], **gi),
        ],
        Stamp(),
    )
    rows = batch.samples.sort("ts_ms", "metric").select("device_id", "ts_ms", "metric", "value").rows()
    assert rows == [
        ("GPU-x", 1000, "gpu_util", 50.0),
        ("GPU-x", 1000, "power_w", 350.0),
        ("MIG-GPU-x-5", 2000, "gpu_util", 25.0),
        ("MIG-GPU-x-5", 2000, "power_w", 200.0),  # 700 W × 2/7
    ]
    assert sorted(d.device_id for d in batch.devices) == ["GPU-x", "MIG-GPU-x-5"]


def test_the_agent_scrapes_an_exporter_as_its_source(tmp_path: Path) -> None:
    from service.agent.config import AgentSettings
    from service.agent.sampler import Sampler, load_sampler

    with http_stub() as stub:
        stub.default = Reply(body=(FIXTURES / "onprem_dgx_h100_plain.prom").read_text())
        settings = AgentSettings(
            service_url="http://svc", token="t", name="dgx", spool_dir=tmp_path,
            source="connectors.dcgm_scrape:DcgmScrapeConnector",
            source_options={"url": f"{stub.url}/metrics", "interval_s": 5, "node": "dgx-h100-017"},
        )  # fmt: skip
        sampler = load_sampler(settings)
        try:
            assert isinstance(sampler, Sampler)
            batch = sampler.sample()
            assert len(sampler.devices()) == 8
            assert {d.node for d in batch.devices} == {"dgx-h100-017"}
            assert batch.samples.filter(pl.col("metric") == "gpu_util").height == 8
        finally:
            sampler.close()  # type: ignore[attr-defined]
