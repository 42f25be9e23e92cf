"""The recorded-formats suite for dcgm-exporter: pages as the real exporter serves them
(``tests/fixtures/recorded/dcgm/*.prom``, provenance in each header), run through the real
connectors — scraped by ``dcgm_scrape`` (the node agent's path), and backfilled into a real
Prometheus the way the chart's ServiceMonitor stores them (``honorLabels`` false and true) and read
by ``prometheus`` — then through the real ingest, to hand-computed ledger rows.

Each page is one scrape; an hour of history is that page every ``period`` seconds with every
energy counter advanced by the power on the same series × period (a GPU at constant power), so
energy per physical GPU is ∫P dt = P × 3600 s.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest
from prom.promserver import running_prometheus, series_text
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, select

from connectors.dcgm_scrape import DcgmScrapeConfig, DcgmScrapeConnector
from connectors.prometheus import PrometheusConfig, PrometheusConnector
from connectors.sdk import SampleBatch, Sampling
from service.ledger.ingest import ingest_window
from service.models import Device, LedgerHour

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded" / "dcgm"
H10 = dt.datetime(2026, 11, 30, 10, tzinfo=dt.UTC)
HOUR = 3600.0
MIB = 1024 * 1024
SCRAPE_S = 300  # the agent's interval in the scrape tests
_LINE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?P<labels>\{.*\})? (?P<value>\S+)$")


def _page_at(text: str, k: int, period_s: int) -> str:
    """The page at its ``k``-th scrape: energy counters advanced by P × period per scrape."""
    lines = text.splitlines()
    power = {}
    for line in lines:
        m = _LINE.match(line)
        if m and m["name"].upper() == "DCGM_FI_DEV_POWER_USAGE":
            power[m["labels"]] = float(m["value"])
    out = []
    for line in lines:
        m = _LINE.match(line)
        if m and m["name"].upper() == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
            mj = int(m["value"]) + round(power[m["labels"]] * period_s * 1000) * k
            line = f"{m['name']}{m['labels']} {mj}"
        out.append(line)
    return "\n".join(out) + "\n"


class _Replay:
    """The agent's shipped scrapes, read back by the ledger as a period-``interval_s`` source."""

    kind = "metrics"

    def __init__(self, batches: list[SampleBatch], sampling: Sampling) -> None:
        self.batches, self.sampling = batches, sampling

    def discover(self) -> list:
        return [d for b in self.batches for d in b.devices]

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        yield from self.batches


def _scrape_hour(engine: Engine, name: str, node: str | None = None) -> tuple[dict, dict]:
    """13 scrapes (10:00 … 11:00, every 5 minutes) through ``DcgmScrapeConnector`` over HTTP, ingested."""
    text = (RECORDED / name).read_text()
    state = {"k": 0}

    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=_page_at(text, state["k"], SCRAPE_S))

    config = DcgmScrapeConfig(
        name="agent", url="http://exporter:9400/metrics", interval_s=SCRAPE_S, node=node
    )
    batches = []
    with httpx.Client(transport=httpx.MockTransport(serve)) as client:
        clock = lambda: H10 + dt.timedelta(seconds=SCRAPE_S * state["k"])  # noqa: E731
        connector = DcgmScrapeConnector(config, client=client, clock=clock)
        for k in range(3600 // SCRAPE_S + 1):
            state["k"] = k
            batches.append(connector.scrape())
    ingest_window(engine, "agent", _Replay(batches, connector.sampling), H10, H10 + dt.timedelta(hours=1))  # type: ignore[arg-type]
    return _rows(engine)


def _rows(engine: Engine) -> tuple[dict, dict]:
    with engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(select(LedgerHour.__table__)).mappings()]  # type: ignore[attr-defined]
        devices = {r["device_id"]: dict(r) for r in conn.execute(select(Device.__table__)).mappings()}  # type: ignore[attr-defined]
    for r in rows:  # the invariant every row keeps
        assert r["observed_s"] <= r["present_s"] + 1e-6 <= HOUR + 1e-6, r
    by_key = {(r["device_id"], r["workload_key"]): r for r in rows}
    assert len(by_key) == len(rows)
    return by_key, devices


def _energy_per_gpu(rows: dict, devices: dict) -> dict[str, float]:
    per_gpu: dict[str, float] = {}
    for (device_id, _), r in rows.items():
        gpu = devices[device_id]["parent_device_id"] or device_id
        per_gpu[gpu] = per_gpu.get(gpu, 0.0) + r["energy_j"]
    return per_gpu


def _check(rows: dict, expected: Mapping[tuple[str, str], Mapping[str, float | None]]) -> None:
    assert set(rows) == set(expected)
    for key, want in expected.items():
        got = {c: rows[key][c] for c in want}
        assert got == pytest.approx(want, abs=1e-3), key  # the ledger keeps W to 3 places


# --- A100, MIG flex (exporter 3.3.x, Hostname = the node) -------------------------------------------

U_A100 = ("GPU-3f0c2d4e-8a51-4c2b-9d0e-7b1a6c5e4f01", "GPU-9b7e1a2c-5d3f-4e60-8c1b-2a4d6f8e0c12")


def test_a100_mig_flex_scraped(engine: Engine) -> None:
    rows, devices = _scrape_hour(engine, "a100_mig_flex.prom")
    g0, g1 = U_A100
    mig = {gi: f"MIG-{g0}-{gi}" for gi in (1, 5, 13, 14)}
    # 280 W whole-GPU on every instance → read once: 1,008,000 J, split 3/7, 2/7, 1/7, 1/7 (not 4×).
    assert _energy_per_gpu(rows, devices) == pytest.approx({g0: 280 * HOUR, g1: 62 * HOUR})
    infer, nb = "k8s:serving/infer-a-7d9c5/server", "k8s:research/nb-1/notebook"
    full = {"present_s": HOUR, "observed_s": HOUR}
    _check(
        rows,
        {
            (mig[1], infer): {**full, "energy_j": 432_000.0, "power_avg_w": 120.0, "busy_s": 2925.0,
                              "mem_used_max_b": 30212.0 * MIB, "mem_total_b": 40334.0 * MIB,
                              "temp_max_c": 51.0},
            (mig[5], ""): {**full, "energy_j": 288_000.0, "power_avg_w": 80.0, "busy_s": 0.0},
            (mig[13], nb): {**full, "energy_j": 144_000.0, "power_avg_w": 40.0, "busy_s": 900.0},
            (mig[14], ""): {**full, "energy_j": 144_000.0, "power_avg_w": 40.0, "idle_s": HOUR},
            (g1, ""): {**full, "energy_j": 223_200.0, "power_avg_w": 62.0, "mem_total_b": 81050.0 * MIB},
        },
    )  # fmt: skip
    assert g0 not in devices  # a MIG-mode GPU is no ledger device itself
    assert {d["node"] for d in devices.values()} == {"gpu-a100-04"}
    assert [devices[mig[gi]]["gpu_fraction"] * 7 for gi in (1, 5, 13, 14)] == pytest.approx([3, 2, 1, 1])


# --- A30, MIG flex, issue #317's readings; GPU 1 holds 3 of 4 slices -------------------------------

V_A30 = ("GPU-265c9814-6156-355b-e589-ff2064894f16", "GPU-2d20791a-b4a6-ba59-97f1-e95b99fe5b49")


def test_a30_mig_flex_from_issue_317_scraped(engine: Engine) -> None:
    rows, devices = _scrape_hour(engine, "a30_mig_flex.prom")
    g0, g1 = V_A30
    # GPU 0: instances read 52.636 and 52.746 W (one field, sampled at two moments): the largest
    # reading is the GPU's; its counter grows 52.746 W × 300 s a scrape → 189,885.6 J, ¼ each.
    # GPU 1: 56.127 W → 202,057.2 J, of which 2g.12gb gets ½, 1g.6gb ¼; the free ¼ goes to no device.
    assert _energy_per_gpu(rows, devices) == pytest.approx({g0: 189_885.6, g1: 151_542.9})
    full = {"present_s": HOUR, "observed_s": HOUR}
    quarter0 = {**full, "energy_j": 47_471.4, "power_avg_w": 52.746 / 4, "temp_max_c": 38.0}
    _check(
        rows,
        {
            (f"MIG-{g0}-3", "k8s:team-a/svc-a30-0/app"): {**quarter0, "busy_s": 1440.0},
            (f"MIG-{g0}-4", ""): {**quarter0, "busy_s": 0.0},
            (f"MIG-{g0}-5", ""): quarter0,
            (f"MIG-{g0}-6", ""): quarter0,
            (f"MIG-{g1}-1", "k8s:team-b/train-b-0/trainer"): {
                **full, "energy_j": 101_028.6, "power_avg_w": 56.127 / 2, "busy_s": 3240.0
            },
            (f"MIG-{g1}-5", ""): {**full, "energy_j": 50_514.3, "power_avg_w": 56.127 / 4},
        },
    )  # fmt: skip
    assert {devices[d]["gpu_fraction"] for d, _ in rows} == {0.25, 0.5}  # A30: 4 slices
    assert {d["node"] for d in devices.values()} == {"yg-data-k8s-gpu-a30-node-test-test0003.mt"}


# --- Time-shared GPUs (--kubernetes-virtual-gpus) ---------------------------------------------------

X_VGPU = ("GPU-0d1e2f30-4152-4637-8495-a6b7c8d9e0f1", "GPU-1e2f3041-5263-4748-95a6-b7c8d9e0f102")
POD_A, POD_B = "k8s:team-a/notebook-a/jupyter", "k8s:team-b/notebook-b/jupyter"


def _virtual_gpu_rows() -> dict[tuple[str, str], dict[str, float | None]]:
    """GPU 0: pods' SM 60 % and 20 % → shares ¾ and ¼ of the device's time, energy and busy time
    (device GPU_UTIL 80 %); each pod's own memory, the device's total; no unallocated row for it."""
    g0, g1 = X_VGPU
    total = (30000 + 51559) * MIB
    return {
        (g0, POD_A): {"present_s": 2700.0, "observed_s": 2700.0, "busy_s": 2160.0, "energy_j": 1_080_000.0,
                      "power_avg_w": 400.0, "mem_used_max_b": 21000.0 * MIB, "mem_total_b": total},
        (g0, POD_B): {"present_s": 900.0, "observed_s": 900.0, "busy_s": 720.0, "energy_j": 360_000.0,
                      "power_avg_w": 400.0, "mem_used_max_b": 9000.0 * MIB, "mem_total_b": total},
        (g1, ""): {"present_s": HOUR, "observed_s": HOUR, "busy_s": 0.0, "energy_j": 259_200.0,
                   "mem_total_b": 81559.0 * MIB},
    }  # fmt: skip


def test_virtual_gpus_scraped(engine: Engine) -> None:
    rows, devices = _scrape_hour(engine, "h100_virtual_gpus.prom")
    _check(rows, _virtual_gpu_rows())
    assert _energy_per_gpu(rows, devices) == pytest.approx({X_VGPU[0]: 400 * HOUR, X_VGPU[1]: 72 * HOUR})
    assert {d["node"] for d in devices.values()} == {"gpu-node-31"}  # hostname (#655)


# --- Old label names, pre-#129 Hostname (the exporter pod), lower-cased names ------------------------

Y_V100 = ("GPU-a6158b59-2c1e-1e63-0068-9178c4298abd", "GPU-8d5053b3-9280-7d1a-751b-4fd2fdd547c5")


def _v100_rows() -> dict[tuple[str, str], dict[str, float | None]]:
    full = {"present_s": HOUR, "observed_s": HOUR}
    return {
        (Y_V100[0], "k8s:hpc/sim-0/train"): {**full, "busy_s": 3168.0, "energy_j": 900_000.0,
                                             "mem_total_b": 32510.0 * MIB, "temp_max_c": 60.0},
        (Y_V100[1], ""): {**full, "busy_s": 0.0, "energy_j": 144_000.0},
    }  # fmt: skip


def test_old_names_lowercased_scraped(engine: Engine) -> None:
    rows, devices = _scrape_hour(engine, "v100_old_names_lowercase.prom")
    _check(rows, _v100_rows())
    # Hostname is the exporter's pod there (before #129): no node rather than a wrong one.
    assert {d["node"] for d in devices.values()} == {None}
    page = (RECORDED / "v100_old_names_lowercase.prom").read_text()
    config = DcgmScrapeConfig(name="a", url="http://exporter:9400/metrics", node="gpu-v100-01")
    serve = httpx.MockTransport(lambda request: httpx.Response(200, text=page))
    with httpx.Client(transport=serve) as client:
        batch = DcgmScrapeConnector(config, client=client).scrape()
    assert {d.node for d in batch.devices} == {"gpu-v100-01"}  # the agent's configured node


# --- Through a real Prometheus, stored as the chart's ServiceMonitor stores them ---------------------

TARGET = {  # what Prometheus adds from the Kubernetes service discovery of the exporter's pod
    "container": "nvidia-dcgm-exporter",
    "endpoint": "gpu-metrics",
    "namespace": "gpu-operator",
    "pod": "nvidia-dcgm-exporter-x7k2p",
    "service": "nvidia-dcgm-exporter",
}


def _scraped(labels: dict[str, str], job: str, honor_labels: bool) -> dict[str, str]:
    """The series as stored: target labels added; a clash keeps the exporter's value
    (``honor_labels: true``) or renames it ``exported_<name>`` (false, the chart's default)."""
    out = dict(labels)
    for key, value in {**TARGET, "job": job, "instance": "10.0.7.12:9400"}.items():
        if key in out and not honor_labels:
            out[f"exported_{key}"] = out.pop(key)
        out.setdefault(key, value)
    return out


def _history(name: str, job: str, honor_labels: bool) -> str:
    """An hour of the page scraped every 15 s (raw samples 8 s before each grid point)."""
    text = (RECORDED / name).read_text()
    t0 = int(H10.timestamp())
    first = {(s.name, tuple(s.labels.items())): s.value for f in text_string_to_metric_families(text)
             for s in f.samples}  # fmt: skip
    then = {(s.name, tuple(s.labels.items())): s.value
            for f in text_string_to_metric_families(_page_at(text, 1, 15)) for s in f.samples}  # fmt: skip
    ts = [t0 + 15 * k - 8 for k in range(241)]
    return "".join(
        series_text(metric, _scraped(dict(labels), job, honor_labels), ts,
                    [value + (then[(metric, labels)] - value) * k for k in range(241)])
        for (metric, labels), value in first.items()
    )  # fmt: skip


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    history = "".join(
        [
            _history("h100_mig_mixed.prom", "op-honor-false", honor_labels=False),
            _history("h100_mig_mixed.prom", "op-honor-true", honor_labels=True),
            _history("h100_virtual_gpus.prom", "vgpu", honor_labels=False),
            _history("v100_old_names_lowercase.prom", "lower", honor_labels=True),
        ]
    )
    with running_prometheus(tmp_path_factory.mktemp("recorded-dcgm"), history) as url:
        yield url


def _prometheus_hour(engine: Engine, url: str, job: str) -> tuple[dict, dict]:
    config = PrometheusConfig(name=job, url=url, step_s=15, label_selector=f'{{job="{job}"}}')
    with PrometheusConnector(config) as connector:
        ingest_window(engine, job, connector, H10, H10 + dt.timedelta(hours=1))
    return _rows(engine)


W_H100 = (
    "GPU-58e8f5ea-13cc-013a-d88f-2bcf5ae8bc77",
    "GPU-6a1d2e3f-4b5c-4d6e-8f70-819203a4b5c6",
    "GPU-7b2e3f40-5c6d-4e7f-9081-92a314b5c6d7",
)


@pytest.mark.parametrize("job", ["op-honor-false", "op-honor-true"])
def test_h100_mig_mixed_profiles_through_prometheus(engine: Engine, prometheus_url: str, job: str) -> None:
    rows, devices = _prometheus_hour(engine, prometheus_url, job)
    g0, g1, g2 = W_H100
    # 350 W on each of GPU 0's three instances → 1,260,000 J once, by 4/7, 2/7, 1/7.
    assert _energy_per_gpu(rows, devices) == pytest.approx({g0: 350 * HOUR, g1: 560 * HOUR, g2: 70 * HOUR})
    full = {"present_s": HOUR, "observed_s": HOUR}
    _check(
        rows,
        {
            (f"MIG-{g0}-1", "k8s:llm/serve-70b-0/vllm"): {**full, "energy_j": 720_000.0, "power_avg_w": 200.0,
                                                          "busy_s": 2160.0, "mem_total_b": None},
            (f"MIG-{g0}-2", "k8s:ml/embed-1/embed"): {**full, "energy_j": 360_000.0, "busy_s": 1080.0},
            (f"MIG-{g0}-9", ""): {**full, "energy_j": 180_000.0, "power_avg_w": 50.0, "idle_s": HOUR},
            (g1, "k8s:research/train-llama-0/pytorch"): {**full, "energy_j": 2_016_000.0, "busy_s": 3492.0,
                                                          "mem_used_max_b": 70000.0 * MIB,
                                                          "mem_total_b": 81559.0 * MIB},
            (g2, ""): {**full, "energy_j": 252_000.0, "busy_s": 0.0},  # the exporter's own pod is no owner
        },
    )  # fmt: skip
    assert {d["node"] for d in devices.values()} == {"gpu-node-12"}  # hostname = NODE_NAME (#655)
    assert {r["namespace"] for r in rows.values()} == {"llm", "ml", "research", None}


def test_virtual_gpus_through_prometheus(engine: Engine, prometheus_url: str) -> None:
    rows, _ = _prometheus_hour(engine, prometheus_url, "vgpu")
    _check(rows, _virtual_gpu_rows())


def test_lowercased_names_through_prometheus(engine: Engine, prometheus_url: str) -> None:
    rows, devices = _prometheus_hour(engine, prometheus_url, "lower")
    _check(rows, _v100_rows())
    assert {d["node"] for d in devices.values()} == {None}  # Hostname is the exporter pod (pre-#129)
