"""Issue 16's "done when", in one test fleet (one database, SQLite and PostgreSQL):

a cloud GPU owned by its tag, a containerd pod owned by its namespace's label, a Slurm job owned by
its account, a HAMi pod at 30 % cores, an A30 MIG slice, an AMD GPU and an Ascend NPU each land in
``cost(groupBy: [PROJECT, OWNER_RULE])`` — the real app over GraphQL — with the hand-computed cost
and the rule that named the owner; then one rule is changed in the config and ``gpu-ledger
reattribute --start --end`` (the CLI) moves cost between projects, the total unchanged.

Every kind comes in through its own real path:

* **cloud** — the recorded CUR 2.0 export (tests/fixtures/aws/cur2_2025-09_daily.csv, September
  2025, every GPU instance tagged ``user_project``) read by the ``aws_cur`` connector and
  ``ingest_billing`` under the rules: no metrics, so every billed GPU-hour is unmonitored spend
  owned through ``cloud.tag:project``. Hand totals (tests/fixtures/README.md): pretrain-70b =
  3,302.40 + 27,740.16 = 31,042.56; chat-serving = 1,134.40; batch-eval = 24 × 11.3481 = 272.3544.
* **node agent** on a containerd Kubernetes node (node ``gpu-node-17``, 2026-11-30 09:00–10:00,
  a reading a minute): the real agent loader and sampler over the fake ``libnvidia-ml.so.1``, a
  fake /proc, the kubelet's pod-resources API (gRPC fake kubelet, real proto) and the API server
  (fake, official client); its spool pushed to ``/api/v1/batches``, ingested by the ``agent``
  connector. GPU 0 (H200): pod ml-research/bert-train-0 (process 4242), whose namespace carries
  ``cost-center=cc-4711``. GPU 1 (H200): pod vision/detect-0 (process 5151) capped at 30 % cores by
  HAMi — the pod's ``hami.io/vgpu-devices-allocated`` annotation read through the API, as the
  unprivileged agent does. GPU 2: an A30 in MIG mode with one ``1g.6gb`` instance (NVML: 1 of 4
  slices) held by pod speech/whisper-0 (process 7777).
* **Slurm** — the recorded ``sacct --parsable2`` day (tests/fixtures/slurm/sacct-2026-11-30.txt,
  job 4711: account physics) read by the ``slurm`` facts connector; the job's GPU-hour on gpu01 as
  a node's metrics name it: ``slurm:4711``, from the process's ``job_4711`` cgroup read by the
  agent's ProcessAttributor.
* **AMD and Ascend** — one hour (09:00–10:00) of the recorded exporter pages' series
  (tests/fixtures/amd/device-metrics-exporter.prom: MI300X 692251001124 running pod llm/train-7;
  tests/fixtures/ascend/910b3-node.prom: 910B3 chip 0 running pod ``pretrain-0``, its namespace
  label set to ``recsys`` here so that the two accelerators' pods are different projects),
  backfilled into a real Prometheus every 15 s and read by the ``prometheus`` connector with
  ``exporter = "amd"`` / ``"ascend"``.

Price: one on-prem rate card, 4.00 USD per GPU-hour for every on-prem model; the cloud is priced by
its bill. Hand-computed (rate × GPU-hours × fraction of the GPU):

==========================  ==================  =============================  ======================
what                        project             rule                           cost (USD)
==========================  ==================  =============================  ======================
CUR instances R1, R2        pretrain-70b        project-from-cloud-tag         31,042.56 (the bill)
CUR instance R3             chat-serving        project-from-cloud-tag         1,134.40 (the bill)
CUR instance R4             batch-eval          project-from-cloud-tag         272.3544 (the bill)
containerd pod, GPU 0       research            project-from-cost-center       4.00 × 1 h × 1 = 4.00
HAMi pod, GPU 1             vision              project-from-namespace         4.00 × 1 h × 0.30 = 1.20
GPU 1's other 70 %          (unallocated)       —                              4.00 × 1 h × 0.70 = 2.80
A30 1g.6gb slice            speech              project-from-namespace         4.00 × 1 h × 1/4 = 1.00
Slurm job 4711 on gpu01-0   physics             project-from-slurm-account     4.00 × 1 h × 1 = 4.00
AMD MI300X                  llm                 project-from-namespace         4.00 × 1 h × 1 = 4.00
Ascend 910B3 chip 0         recsys              project-from-namespace         4.00 × 1 h × 1 = 4.00
==========================  ==================  =============================  ======================

Total 32,449.3144 + 4.00 + 1.20 + 2.80 + 1.00 + 4.00 + 4.00 + 4.00 = 32,470.3144.

Then the namespace rule gains ``values = { vision = "research" }``: the HAMi pod's 1.20 moves from
vision to research (research: 4.00 by the cost-center rule + 1.20 by the namespace rule); the
total stays 32,470.3144.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar, Literal

import polars as pl
import pytest
from nvml.fake_nvml_lib import FakeNvml, make_fake
from nvml.h200_replay import h200, state
from prom.promserver import running_prometheus, series_text
from prometheus_client.parser import text_string_to_metric_families
from push_client import push_client
from slurm_process import job_4711_process
from sqlalchemy import Engine, select
from sqlmodel import Session
from starlette.testclient import TestClient
from typer.testing import CliRunner

from connectors.aws_cur import AwsCurConfig, AwsCurConnector
from connectors.base import SAMPLE_SCHEMA, ConnectorConfig, DeviceInfo, SampleBatch, Sampling, WorkloadInfo
from connectors.prometheus import PrometheusConfig, PrometheusConnector
from connectors.registry import default_registry
from connectors.sdk import ConnectorStatus
from service.agent.sampler import load_sampler
from service.agent.spool import Spool
from service.agent_source import AgentConfig, AgentConnector
from service.app import create_app
from service.billing.ingest import ingest_billing
from service.cli import app as cli
from service.facts_ingest import ingest_facts
from service.ledger.ingest import ingest_window
from service.models import Device, LedgerHour
from service.pricing.rates import RateCardConfig, sync_rate_cards
from service.settings import Settings, load_settings
from tests.k8s.fake_kube_api import FakeKubeApi, fake_kube_api
from tests.k8s.fake_kubelet import FakeKubelet, fake_kubelet, pod
from tests.k8s.fake_nvml_sampler import FAKE
from tests.k8s.objects import namespace, node
from tests.k8s.objects import pod as api_pod
from tests.k8s.test_agent_k8s import GPU0, GPU1, nvml_libs, settings, stop_watchers
from tests.k8s.test_kube_meta import eventually

__all__ = ["nvml_libs", "stop_watchers"]  # the fixtures this module takes from the agent's tests

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SEP_2025 = dt.datetime(2025, 9, 1, tzinfo=dt.UTC)
OCT_2025 = dt.datetime(2025, 10, 1, tzinfo=dt.UTC)
H09 = dt.datetime(2026, 11, 30, 9, tzinfo=dt.UTC)  # the on-prem hour
H10 = H09 + dt.timedelta(hours=1)
#: The query and reattribute window: the bill's month to the on-prem hour's month end (456 days).
WINDOW = (SEP_2025, dt.datetime(2026, 12, 1, tzinfo=dt.UTC))
RATE = Decimal("4.00")

A30 = "GPU-00000000-0000-0000-0000-0000000a3030"
SLICE = "MIG-a30a30a3-0000-4000-8000-000000000001"
HAMI_UID, HAMI_CID = "6a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "4c3b2a19" * 8
WHISPER_UID, WHISPER_CID = "7b2c3d4e-5f6a-4b7c-9d8e-0f1a2b3c4d5e", "9d8e7f60" * 8

RULES = """
[[attribution]]
name = "project-from-cloud-tag"
source = "cloud.tag:project"
dimension = "project"

[[attribution]]
name = "project-from-cost-center"
source = "k8s.namespace_label:cost-center"
dimension = "project"
values = {{ cc-4711 = "research" }}

[[attribution]]
name = "project-from-slurm-account"
source = "slurm.account"
dimension = "project"

[[attribution]]
name = "project-from-namespace"
source = "k8s.namespace"
dimension = "project"
{namespace_values}
"""
QUERY = """query($w: TimeWindow!) { cost(window: $w, groupBy: [PROJECT, OWNER_RULE]) {
  project ownerRule unallocated cost { amount currency } } }"""


def _config(tmp_path: Path, engine: Engine, namespace_values: str = "") -> Path:
    path = tmp_path / "ledger.toml"
    url = engine.url.render_as_string(hide_password=False)
    path.write_text(
        f'database_url = "{url}"\nmax_window_days = 500\n[auth]\nanonymous_read = true\n'
        + RULES.format(namespace_values=namespace_values)
    )
    return path


# --- the containerd node: fake NVML, /proc, kubelet and API server --------------------------------


def _proc(root: Path, pid: int, cgroup: str) -> None:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup").write_text(cgroup + "\n")
    (d / "comm").write_text("python\n")
    (d / "status").write_text(f"Name:\tpython\nPid:\t{pid}\nUid:\t0\t0\t0\t0\n")  # no environ: unreadable


def _containerd(uid: str, cid: str) -> str:
    return (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope"
    )


def _a30_with_one_slice(i: int) -> dict[str, Any]:
    """An A30 in MIG mode, one ``1g.6gb`` GPU instance (1 slice; the A30's profiles top out at 4)
    held by process 7777, as the fake NVML's state file spells it."""
    gpu = h200(i, uuid=A30, name="NVIDIA A30", mig_mode=1, gpm_supported=0, gi_profiles="0:1,1:2,3:4,7:1,8:2")
    gpu |= {f"gpu.{i}.mig.count": 1}
    keys = {"uuid": SLICE, "name": "NVIDIA A30 MIG 1g.6gb", "gi_id": 1, "mem_total": 6_000_000_000,
            "mem_used": 1, "gi_slices": 1, "procs": "7777:1"}  # fmt: skip
    return gpu | {f"gpu.{i}.mig.0.{k}": v for k, v in keys.items()}


@pytest.fixture
def node_nvml(
    nvml_libs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeNvml]:
    fake = make_fake(nvml_libs["full"], tmp_path, monkeypatch)
    fake.write(
        state(
            h200(0, procs="4242:2147483648", util_gpu=87),
            h200(1, procs="5151:4000000000", util_gpu=50),
            _a30_with_one_slice(2),
        )
    )
    FAKE["nvml"] = fake
    yield fake
    FAKE.clear()


@pytest.fixture
def node_kubelet() -> Iterator[FakeKubelet]:
    from connectors.podresources import api_pb2

    with fake_kubelet() as k:
        k.answer = api_pb2.ListPodResourcesResponse(
            pod_resources=[
                pod("ml-research", "bert-train-0", ("trainer", {"nvidia.com/gpu": [GPU0]})),
                pod("speech", "whisper-0", ("asr", {"nvidia.com/mig-1g.6gb": [SLICE]})),
            ]
        )
        yield k


@pytest.fixture
def node_api() -> Iterator[FakeKubeApi]:
    with fake_kube_api() as api:
        api.put("pods", api_pod())  # bert-train-0 in ml-research
        hami = api_pod("detect-0", "vision", HAMI_UID, labels={}, containers={"worker": HAMI_CID})
        # HAMi's scheduler writes the allocation: container 0 gets 30 % of GPU 1's cores, 4000 MiB
        hami["metadata"]["annotations"] = {"hami.io/vgpu-devices-allocated": f"{GPU1},NVIDIA,4000,30:;"}
        api.put("pods", hami)
        api.put(
            "pods", api_pod("whisper-0", "speech", WHISPER_UID, labels={}, containers={"asr": WHISPER_CID})
        )
        api.put("namespaces", namespace("ml-research", {"cost-center": "cc-4711"}))
        api.put("namespaces", namespace("vision", {}))
        api.put("namespaces", namespace("speech", {}))
        api.put("nodes", node())
        yield api


def _agent_node(engine: Engine, tmp_path: Path, kubelet: FakeKubelet, api: FakeKubeApi, rules: Any) -> None:
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir()
    config = settings(
        agent_dir, pod_resources_socket=kubelet.socket, kubernetes_api=str(api.kubeconfig(agent_dir))
    )
    # settings() wrote the trainer's process 4242 (bert-train-0); the HAMi pod's and the slice's:
    _proc(agent_dir, 5151, _containerd(HAMI_UID, HAMI_CID))
    _proc(agent_dir, 7777, _containerd(WHISPER_UID, WHISPER_CID))
    sampler = load_sampler(config)
    eventually(lambda: all(e.is_set() for e in sampler.meta.synced.values()), "listed")  # type: ignore[attr-defined]
    spool = Spool(agent_dir / "spool", "n17", "node-a", fsync=False)
    for minute in range(60):  # 09:00 … 09:59, each reading covering its minute
        FAKE["now_s"] = H09.timestamp() + 60 * minute
        spool.append(sampler.sample())
    sealed = spool.seal()
    assert sealed is not None
    with push_client(engine, now=H10, period_s=60) as client:
        headers = {"Authorization": f"Bearer {'a' * 32}", "Content-Type": "application/json"}
        answer = client.post("/api/v1/batches", content=json.dumps(spool.payload(sealed)), headers=headers)
        assert answer.status_code == 200, answer.text
    connector = AgentConnector(AgentConfig(name="node-a", period_s=60), engine=engine, clock=lambda: H10)
    result = ingest_window(engine, "node-a", connector, H09, H10, attribution_rules=rules)
    assert result.status == ConnectorStatus.OK


# --- the Slurm node: sacct's facts and a metrics source naming the job's cgroup --------------------


class _SlurmNodeConfig(ConnectorConfig):
    pass


class _SlurmNode:
    """gpu01's GPU 0 held all hour by the process the attributor finds in job 4711's cgroup."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = _SlurmNodeConfig
    sampling = Sampling.every(60.0)

    def __init__(self, job: WorkloadInfo) -> None:
        self.job = job

    def discover(self) -> list[DeviceInfo]:
        return [DeviceInfo("gpu01-0", "onprem", gpu_model="NVIDIA H200", node="gpu01")]

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        t0 = int(H09.timestamp() * 1000)
        rows = [("gpu01-0", t0 + m * 60_000, "gpu_util", 90.0, self.job.workload_key, 1.0) for m in range(60)]
        yield SampleBatch(pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row"), self.discover(), [self.job])


def _slurm(engine: Engine, tmp_path: Path, rules: Any) -> None:
    sacct = FIXTURES / "slurm" / "sacct-2026-11-30.txt"
    facts = default_registry().build({"name": "slurm-main", "type": "slurm", "path": str(sacct)})
    assert ingest_facts(engine, "slurm-main", facts, H09, H10).status == ConnectorStatus.OK
    job = job_4711_process(tmp_path / "slurm")
    assert job.workload_key == "slurm:4711"
    ingest_window(engine, "gpu01", _SlurmNode(job), H09, H10, attribution_rules=rules)


# --- AMD and Ascend exporters through a real Prometheus -------------------------------------------


def _page_series(path: Path, keep: Any) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(path.read_text())
        for s in family.samples
        if keep(s.name, s.labels)
    ]


def _exporter_history() -> str:
    """09:00:00 … 10:00:00 every 15 s: the AMD page's GPU 692251001124 (pod llm/train-7) and the
    Ascend page's chip 0 (pod pretrain-0, namespace relabelled recsys), values as recorded; the
    scrape adds job and instance (and node for the npu-exporter, as its scrape config relabels)."""
    ts = [int(H09.timestamp()) + 15 * i for i in range(241)]
    out: list[str] = []
    amd = _page_series(
        FIXTURES / "amd" / "device-metrics-exporter.prom",
        lambda name, labels: (
            labels.get("serial_number") == "692251001124"
            and name in ("gpu_gfx_activity", "gpu_power_usage", "gpu_total_vram", "gpu_used_vram")
        ),
    )
    for name, labels, value in amd:
        out.append(
            series_text(
                name, labels | {"job": "amd", "instance": "mi300-node-01:5000"}, ts, [value] * len(ts)
            )
        )
    chip0 = "7C0D3A04-2C204A14-B5100C80-50C61CD1-32C70000"
    ascend = _page_series(
        FIXTURES / "ascend" / "910b3-node.prom", lambda name, labels: labels.get("vdie_id") == chip0
    )
    scrape = {
        "job": "npu-exporter",
        "instance": "10.0.0.5:8082",
        "node": "npu-node-01",
        "namespace": "recsys",
    }
    for name, labels, value in ascend:
        out.append(series_text(name, labels | scrape, ts, [value] * len(ts)))
    return "".join(out)


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_prometheus(tmp_path_factory.mktemp("issue16-prometheus"), _exporter_history()) as url:
        yield url


def _exporters(engine: Engine, url: str, rules: Any) -> None:
    later = H10 + dt.timedelta(hours=5)
    for exporter, job, devices in (("amd", "amd", 1), ("ascend", "npu-exporter", 1)):
        config = PrometheusConfig(
            name=exporter, url=url, step_s=15, exporter=exporter, label_selector=f'{{job="{job}"}}'
        )
        with PrometheusConnector(config, clock=lambda: later) as connector:
            result = ingest_window(engine, exporter, connector, H09, H10, attribution_rules=rules)
        assert result.devices == devices, exporter


# --- the test ---------------------------------------------------------------------------------------


def _onprem_hour(engine: Engine) -> set[tuple[Any, ...]]:
    """(device, workload, vendor, model, GPU fraction, project, rule, cost) of the on-prem hour's rows."""
    h, d = LedgerHour.__table__, Device.__table__
    with engine.connect() as conn:
        rows = conn.execute(
            select(h.c.device_id, h.c.workload_key, h.c.vendor, h.c.gpu_model, d.c.gpu_fraction, h.c.project,
                   h.c.owner_rule, h.c.cost)
            .join(d, d.c.device_id == h.c.device_id)
            .where(h.c.hour_start == H09)
        )  # fmt: skip
        return {tuple(r) for r in rows}


def _cost(client: TestClient) -> dict[tuple[Any, ...], Decimal]:
    window = {"start": WINDOW[0].isoformat(), "end": WINDOW[1].isoformat()}
    body = client.post("/graphql", json={"query": QUERY, "variables": {"w": window}}).json()
    assert "errors" not in body, body
    out: dict[tuple[Any, ...], Decimal] = {}
    for r in body["data"]["cost"]:
        assert r["cost"]["currency"] == "USD"
        key = (r["project"], r["ownerRule"], r["unallocated"])
        assert key not in out, key
        out[key] = Decimal(r["cost"]["amount"])
    return out


CLOUD = "project-from-cloud-tag"
NS = "project-from-namespace"
SLURM = "project-from-slurm-account"
BEFORE = {
    ("pretrain-70b", CLOUD, False): Decimal("31042.56"),
    ("chat-serving", CLOUD, False): Decimal("1134.40"),
    ("batch-eval", CLOUD, False): Decimal("272.3544"),
    ("research", "project-from-cost-center", False): RATE,  # the containerd pod: 4.00 × 1 h
    ("vision", NS, False): Decimal("1.20"),  # the HAMi pod: 4.00 × 1 h × 0.30
    (None, None, True): Decimal("2.80"),  # GPU 1's uncapped 70 %: nobody's
    ("speech", NS, False): Decimal("1.00"),  # the A30 slice: 4.00 × 1 h × 1/4
    ("physics", SLURM, False): RATE,  # job 4711's hour on gpu01-0
    ("llm", NS, False): RATE,  # the MI300X's pod
    ("recsys", NS, False): RATE,  # the 910B3's pod
}
TOTAL = Decimal("32470.3144")


def test_every_kind_of_accelerator_hour_lands_with_its_owner_and_rule_and_reattribute_moves_it(
    engine: Engine,
    tmp_path: Path,
    node_nvml: FakeNvml,
    node_kubelet: FakeKubelet,
    node_api: FakeKubeApi,
    prometheus_url: str,
) -> None:
    settings_: Settings = load_settings(_config(tmp_path, engine))
    rules = settings_.attribution
    with Session(engine) as session:
        card = RateCardConfig(name="site", environment="onprem", rate_per_gpu_hour=RATE, currency="USD",
                              valid_from=WINDOW[0])  # fmt: skip
        sync_rate_cards(session, [card])
        session.commit()

    cur = AwsCurConfig(name="bills", path=str(FIXTURES / "aws" / "cur2_2025-09_daily.csv"))
    with AwsCurConnector(cur) as bills:
        billed = ingest_billing(engine, "bills", bills, SEP_2025, OCT_2025, attribution_rules=rules)
    assert not billed.failed_files
    _agent_node(engine, tmp_path, node_kubelet, node_api, rules)
    _slurm(engine, tmp_path, rules)
    _exporters(engine, prometheus_url, rules)

    # Each kind as its source named it: vendor and model from the source, the slice 1/4 of its A30.
    assert _onprem_hour(engine) == {
        (GPU0, "k8s:ml-research/bert-train-0/trainer", "nvidia", "NVIDIA H200", 1.0, "research",
         "project-from-cost-center", RATE),
        (GPU1, "k8s:vision/detect-0/worker", "nvidia", "NVIDIA H200", 1.0, "vision", NS, Decimal("1.20")),
        (GPU1, "", "nvidia", "NVIDIA H200", 1.0, None, None, Decimal("2.80")),
        (SLICE, "k8s:speech/whisper-0/asr", "nvidia", "NVIDIA A30", 0.25, "speech", NS, Decimal("1.00")),
        ("gpu01-0", "slurm:4711", "nvidia", "NVIDIA H200", 1.0, "physics", SLURM, RATE),
        ("692251001124", "k8s:llm/train-7/trainer", "amd", "AMD Instinct MI300X", 1.0, "llm", NS, RATE),
        ("7C0D3A04-2C204A14-B5100C80-50C61CD1-32C70000", "k8s:recsys/pretrain-0/worker", "huawei",
         "Ascend 910B3", 1.0, "recsys", NS, RATE),
    }  # fmt: skip

    with TestClient(create_app(settings_, engine)) as client:
        first = _cost(client)
        assert first == BEFORE
        assert sum(first.values()) == TOTAL

        # The namespace rule now maps vision to research: the HAMi pod's 1.20 moves, nothing else.
        changed = _config(tmp_path, engine, namespace_values='values = { vision = "research" }')
        args = ["--start", WINDOW[0].isoformat(), "--end", WINDOW[1].isoformat(), "--config", str(changed)]
        result = CliRunner().invoke(cli, ["reattribute", *args])
        assert result.exit_code == 0, result.output
        # owners asked: distinct (source, device, workload) a day — the on-prem hour's 7 rows and the
        # billed instances' 46 instance-days; only the HAMi pod's changes
        assert "with 4 rule(s): 1 of 53 owners changed, 1 hourly rows rewritten, 1 days rebuilt" in (
            result.stdout
        ), result.stdout
        second = _cost(client)
        expected = {k: v for k, v in BEFORE.items() if k[0] != "vision"}
        expected[("research", NS, False)] = Decimal("1.20")
        assert second == expected
        assert sum(second.values()) == TOTAL
        by_project: dict[Any, Decimal] = {}
        for (project, _, _), amount in second.items():
            by_project[project] = by_project.get(project, Decimal(0)) + amount
        assert by_project["research"] == Decimal("5.20") and "vision" not in by_project

        again = CliRunner().invoke(cli, ["reattribute", *args])  # idempotent: nothing moves
        assert again.exit_code == 0 and "0 of 53 owners changed, 0 hourly rows" in again.stdout, again.output
        assert _cost(client) == second
