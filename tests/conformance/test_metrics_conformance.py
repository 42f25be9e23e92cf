"""The metrics contract, run the same way on every registered metrics connector (issue 10, point 5).

Each entry point of the ``gpu_ledger.connectors`` group whose class is ``kind = "metrics"`` has a
case below: a fixture that points the real connector at the local stand-in its own tests use (a
real Prometheus, an HTTP stub serving a recorded dcgm-exporter page, moto, the in-process gRPC
Cloud Monitoring fake, the HTTPS Azure fakes, the agent staging tables) with readings in a known
window. Every case then runs the same checks:

- ``discover()`` returns ``DeviceInfo`` objects with distinct, non-empty ids;
- a window the source has nothing for yields no samples and raises nothing;
- collecting one window twice gives identical batches (the ingestor re-reads windows);
- the source failing (unreachable, unavailable) raises a ``ConnectorError`` subclass whose status
  tells the runner what to do, and a misspelt key is a ``ConfigurationError``;
- ``repr`` of the config (and of the connector) never shows a secret key's value.

A check that cannot apply to a connector says why in its case (``not_applicable``); a registered
metrics entry point without a case fails ``test_every_metrics_entry_point_has_a_case``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import boto3
import grpc
import polars as pl
import pytest
from awsfake.fixtures import cloudwatch_config
from awsfake.server import put_points
from azurefake.server import Reply, Request, StaticCredential, fake_azure, inventory_table
from gcpfake.build import plain_client, series
from gcpfake.server import FakeMetricService, running_fake
from prom.httpstub import Reply as StubReply
from prom.httpstub import http_stub
from prom.promserver import running_prometheus, series_text
from prom.sigv4gate import SigV4Gate
from push_client import NOW, batch, post, push_client
from pydantic import SecretStr

from connectors.azure_monitor import AzureMonitorConfig, AzureMonitorConnector
from connectors.azure_prometheus import AzurePrometheusConfig, AzurePrometheusConnector
from connectors.cloudwatch import CloudWatchConfig, CloudWatchConnector
from connectors.cloudwatch_promql import CloudWatchPromQLConfig, CloudWatchPromQLConnector
from connectors.dcgm_scrape import DcgmScrapeConfig, DcgmScrapeConnector
from connectors.gcp_monitoring import GcpMonitoringConfig, GcpMonitoringConnector
from connectors.prometheus import PrometheusConfig, PrometheusConnector
from connectors.registry import build_connector
from connectors.sdk import (
    ConfigurationError,
    ConnectorError,
    ConnectorStatus,
    DeviceInfo,
    MetricsConnector,
    RetriableError,
    SampleBatch,
    close_connector,
)
from connectors.synthetic import SyntheticConfig, SyntheticConnector
from service.agent_source import AgentConfig, AgentConnector
from service.db import make_engine

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
H = dt.timedelta(hours=1)
MIN = dt.timedelta(minutes=1)
DEAD = "127.0.0.1:9"  # the discard port: nothing listens, a connection is refused at once
Window = tuple[dt.datetime, dt.datetime]


@dataclass
class Source:
    """A connector on a local stand-in, and the facts a check needs about it."""

    connector: MetricsConnector
    window: Window  # the source has readings here
    empty: Window  # the source has nothing here
    fail: Callable[[], object] | None  # makes the source fail (None: see not_applicable["fail"])
    failure: tuple[type[ConnectorError], ConnectorStatus] = (
        RetriableError,
        ConnectorStatus.FAILED_CONNECTION,
    )
    not_applicable: dict[str, str] = field(default_factory=dict)  # check → why it cannot apply


def _rows(batches: list[SampleBatch]) -> int:
    return sum(b.samples.height for b in batches)


# --- the cases ------------------------------------------------------------------------------------


@pytest.fixture
def synthetic_source() -> Iterator[Source]:
    now = dt.datetime(2025, 6, 2, 12, tzinfo=dt.UTC)
    connector = SyntheticConnector(SyntheticConfig(period_s=300), clock=lambda: now)
    # Like a real source it knows nothing of the future: the window after `now` is empty.
    why = {
        "fail": "computes readings from a seed: there is no source to be unreachable or unavailable",
        "secrets": "reads no source, so it has no credentials",
    }
    yield Source(connector, (now - H, now), (now, now + H), None, not_applicable=why)


H10 = dt.datetime(2025, 3, 3, 10, tzinfo=dt.UTC)
GPUS = ("GPU-aaaaaaaa-0000-4000-8000-000000000001", "GPU-bbbbbbbb-0000-4000-8000-000000000002")


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Two DCGM GPUs reporting every 15 s, 10:00–10:05 (the real Prometheus, backfilled)."""
    ts = [int(H10.timestamp()) + 15 * i for i in range(20)]
    text = ""
    for index, uuid in enumerate(GPUS):
        labels = {"UUID": uuid, "gpu": str(index), "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "dgx-01"}
        text += series_text("DCGM_FI_DEV_GPU_UTIL", labels, ts, [40.0 + index] * len(ts))
        text += series_text("DCGM_FI_DEV_POWER_USAGE", labels, ts, [300.0 + index] * len(ts))
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), text) as url:
        yield url


@pytest.fixture
def prometheus_source(prometheus_url: str) -> Iterator[Source]:
    config = PrometheusConfig(name="prom", url=prometheus_url, step_s=15)
    dead = PrometheusConfig(name="prom", url=f"http://{DEAD}", max_retries=0)
    with PrometheusConnector(config, clock=lambda: H10 + 5 * MIN) as connector:
        yield Source(
            connector,
            (H10, H10 + 5 * MIN),
            (H10 - 2 * H, H10 - H),
            lambda: list(PrometheusConnector(dead).collect(H10, H10 + MIN)),
        )


@pytest.fixture
def cloudwatch_promql_source(prometheus_url: str) -> Iterator[Source]:
    """The same Prometheus behind a proxy that checks SigV4 as AWS does (OTel Container Insights
    and Amazon Managed Prometheus are queried so)."""
    key, secret = "AKIDCONFORMANCE00001", "conformance-secret"
    session = boto3.Session(aws_access_key_id=key, aws_secret_access_key=secret, region_name="us-east-1")
    with SigV4Gate(prometheus_url, key, secret).running() as gate:
        config = CloudWatchPromQLConfig(name="otel-ci", region="us-east-1", url=gate.url, step_s=15)
        dead = CloudWatchPromQLConfig(name="otel-ci", region="us-east-1", url=f"http://{DEAD}", max_retries=0)
        with CloudWatchPromQLConnector(config, session=session, clock=lambda: H10 + 5 * MIN) as connector:
            yield Source(
                connector,
                (H10, H10 + 5 * MIN),
                (H10 - 2 * H, H10 - H),
                lambda: list(CloudWatchPromQLConnector(dead, session=session).collect(H10, H10 + MIN)),
            )


@pytest.fixture
def dcgm_scrape_source() -> Iterator[Source]:
    now = dt.datetime(2025, 9, 20, 10, 0, 30, tzinfo=dt.UTC)
    dead = DcgmScrapeConfig(name="dcgm", url=f"http://{DEAD}/metrics", max_retries=0)
    with http_stub() as stub:
        stub.default = StubReply(body=(FIXTURES / "dcgm" / "onprem_dgx_h100_plain.prom").read_text())
        config = DcgmScrapeConfig(name="dcgm", url=f"{stub.url}/metrics", node="dgx-h100-017")
        with DcgmScrapeConnector(config, clock=lambda: now) as connector:
            yield Source(
                connector,
                (now - MIN, now + MIN),
                (now - 2 * H, now - H),  # a scrape has no history
                lambda: DcgmScrapeConnector(dead, clock=lambda: now).discover(),
            )


T0 = dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)


def _cloudwatch_config(endpoint: str, **extra: Any) -> CloudWatchConfig:
    return cloudwatch_config(endpoint, **extra)


@pytest.fixture
def cloudwatch_source(moto: str, aws_client: Callable[..., Any]) -> Iterator[Source]:
    """Two GPUs of one p4d instance with CloudWatch agent readings every minute, 10:00–10:04."""
    stamps = [T0 + i * MIN for i in range(5)]
    for index in range(2):
        dims = {"index": str(index), "InstanceId": "i-0001", "InstanceType": "p4d.24xlarge",
                "host": "ip-i-0001", "name": "NVIDIA A100-SXM4-40GB", "arch": "Ampere"}  # fmt: skip
        put_points(
            aws_client("cloudwatch"), "CWAgent", "nvidia_smi_utilization_gpu", dims, stamps, [50.0] * 5
        )
    dead = _cloudwatch_config(f"http://{DEAD}")
    with CloudWatchConnector(_cloudwatch_config(moto), clock=lambda: T0 + H) as connector:
        yield Source(
            connector,
            (T0, T0 + 5 * MIN),
            (T0 - 2 * H, T0 - H),
            lambda: list(CloudWatchConnector(dead, clock=lambda: T0 + H).collect(T0, T0 + MIN)),
        )


@pytest.fixture
def gcp_monitoring_source() -> Iterator[Source]:
    """Two L4 GPUs of one GCE instance, ops-agent utilization stamped 10:01–10:03."""
    ends = [H10 + (m + 1) * MIN for m in range(3)]
    resource = {"project_id": "proj-a", "instance_id": "111", "zone": "europe-west4-b"}
    held = [
        series("agent.googleapis.com/gpu/utilization", resource,
               {"gpu_number": str(g), "model": "NVIDIA L4", "uuid": f"GPU-{g}"}, ends, [10.0 * (g + 1)] * 3)
        for g in range(2)
    ]  # fmt: skip
    service = FakeMetricService({"proj-a": held}, period_s=60)
    config = GcpMonitoringConfig(
        name="gcp", projects=["proj-a"], families=["ops_agent"], max_retries=1, backoff_s=0.01, timeout_s=5.0
    )

    def unavailable() -> object:
        service.fail_always = (grpc.StatusCode.UNAVAILABLE, "backend down")
        try:
            return list(connector.collect(H10, H10 + 5 * MIN))
        finally:
            service.fail_always = None

    with running_fake(service) as target, plain_client(target) as client:
        connector = GcpMonitoringConnector(config, client=client, clock=lambda: H10 + 8 * MIN)
        why = {"secrets": "credentials are a file path (credentials_file) or the environment's ADC"}
        yield Source(connector, (H10, H10 + 5 * MIN), (H10 - 2 * H, H10 - H), unavailable, not_applicable=why)


A10 = dt.datetime(2025, 9, 20, 10, tzinfo=dt.UTC)  # the Azure fixtures' hour


def _log_analytics(request: Request) -> Reply:
    """The recorded InsightsMetrics answer, cut to the request's ``timespan`` as the service does;
    the KubePodInventory join answers a workspace that holds none of those pods."""
    if request.body["query"].lstrip().startswith("KubePodInventory"):
        return Reply(200, {"tables": [inventory_table([])]})
    body = json.loads((FIXTURES / "azure" / "log_analytics_query_insightsmetrics_gpu.json").read_text())
    first, last = (
        dt.datetime.fromisoformat(t.replace("Z", "+00:00")) for t in request.body["timespan"].split("/")
    )
    table = body["tables"][0]
    table["rows"] = [
        r for r in table["rows"] if first <= dt.datetime.fromisoformat(r[0].replace("Z", "+00:00")) < last
    ]
    return Reply(200, body)


@pytest.fixture
def azure_monitor_source(tmp_path: Path) -> Iterator[Source]:
    def config(url: str, ca: str) -> AzureMonitorConfig:
        return AzureMonitorConfig(name="aks", workspace_id="0b8f5e2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b",
                                  region="eastus", logs_endpoint=url, ca_file=ca, max_retries=0)  # fmt: skip

    with fake_azure(tmp_path, _log_analytics) as fake:
        dead = AzureMonitorConnector(config(f"https://{DEAD}", fake.ca_path), credential=StaticCredential())
        connector = AzureMonitorConnector(
            config(fake.url, fake.ca_path), credential=StaticCredential(), clock=lambda: A10 + 10 * MIN
        )
        with connector, dead:
            yield Source(
                connector, (A10, A10 + H), (A10 - 2 * H, A10 - H), lambda: list(dead.collect(A10, A10 + H))
            )


def _managed_prometheus(request: Request) -> Reply:
    """The recorded DCGM_FI_DEV_GPU_UTIL matrix cut to the query's [start, end], as Prometheus does;
    the other fields have no series."""
    body = json.loads((FIXTURES / "azure" / "managed_prometheus_query_range_dcgm_gpu_util.json").read_text())
    if not request.query["query"][0].startswith("last_over_time(DCGM_FI_DEV_GPU_UTIL["):
        body["data"]["result"] = []
    start, end = float(request.query["start"][0]), float(request.query["end"][0])
    for item in body["data"]["result"]:
        item["values"] = [v for v in item["values"] if start <= float(v[0]) <= end]
    body["data"]["result"] = [item for item in body["data"]["result"] if item["values"]]
    return Reply(200, body)


@pytest.fixture
def azure_prometheus_source(tmp_path: Path) -> Iterator[Source]:
    with fake_azure(tmp_path, _managed_prometheus) as fake:
        config = AzurePrometheusConfig(
            name="amw", url=fake.url, ca_file=fake.ca_path, step_s=60, max_retries=0
        )
        dead = AzurePrometheusConfig(name="amw", url=f"https://{DEAD}", ca_file=fake.ca_path, max_retries=0)
        credential = StaticCredential()
        with AzurePrometheusConnector(
            config, credential=credential, clock=lambda: A10 + 5 * MIN
        ) as connector:
            yield Source(
                connector,
                (A10, A10 + H),
                (A10 - 2 * H, A10 - H),
                lambda: list(AzurePrometheusConnector(dead, credential=credential).collect(A10, A10 + MIN)),
            )


@pytest.fixture
def agent_source(sqlite_url: str) -> Iterator[Source]:
    """One batch of three readings pushed through the real endpoint into the staging tables."""
    engine = make_engine(sqlite_url)
    with push_client(engine) as client:
        assert post(client, batch()).status_code == 200
    config = AgentConfig(name="node-a", token="a" * 32)
    connector = AgentConnector(config, engine=engine, clock=lambda: NOW)
    # The agent source is the service's own database, not a remote: the failure a runner must
    # classify is being built without it.
    yield Source(
        connector,
        (NOW - 2 * H, NOW),
        (NOW - 3 * 24 * H, NOW - 2 * 24 * H),
        lambda: AgentConnector(config),
        failure=(ConfigurationError, ConnectorStatus.INVALID_CONFIGURATION),
    )
    engine.dispose()


CASES = {
    "synthetic": "synthetic_source",
    "prometheus": "prometheus_source",
    "dcgm_scrape": "dcgm_scrape_source",
    "cloudwatch": "cloudwatch_source",
    "cloudwatch_promql": "cloudwatch_promql_source",
    "gcp_monitoring": "gcp_monitoring_source",
    "azure_monitor": "azure_monitor_source",
    "azure_prometheus": "azure_prometheus_source",
    "agent": "agent_source",
}


@pytest.fixture(params=sorted(CASES))
def source(request: pytest.FixtureRequest) -> Source:
    return request.getfixturevalue(CASES[request.param])


# --- the checks -----------------------------------------------------------------------------------


def test_every_metrics_entry_point_has_a_case() -> None:
    group = entry_points(group="gpu_ledger.connectors")
    metrics = {ep.name for ep in group if getattr(ep.load(), "kind", None) == "metrics"}
    assert metrics == set(CASES)


def test_it_is_a_metrics_connector(source: Source) -> None:
    assert isinstance(source.connector, MetricsConnector)
    assert source.connector.kind == "metrics"
    assert source.connector.sampling.period_s > 0


def test_discovery_returns_devices_with_ids(source: Source) -> None:
    devices = source.connector.discover()
    ids = [d.device_id for d in devices]
    assert devices and all(isinstance(d, DeviceInfo) for d in devices)
    assert all(isinstance(i, str) and i for i in ids) and len(set(ids)) == len(ids)


def test_an_empty_window_yields_no_samples_and_no_error(source: Source) -> None:
    assert _rows(list(source.connector.collect(*source.empty))) == 0


def test_the_same_window_twice_gives_identical_batches(source: Source) -> None:
    first, again = (list(source.connector.collect(*source.window)) for _ in range(2))
    assert _rows(first) > 0  # else the check would prove nothing
    assert len(again) == len(first)
    for a, b in zip(first, again, strict=True):
        assert a.samples.sort(pl.all()).equals(b.samples.sort(pl.all()))
        assert sorted(a.devices, key=repr) == sorted(b.devices, key=repr)
        assert sorted(a.workloads, key=repr) == sorted(b.workloads, key=repr)


def test_a_failing_source_raises_a_classified_error(source: Source) -> None:
    if source.fail is None:
        assert source.not_applicable["fail"]  # a case must say why
        return
    expected, status = source.failure
    with pytest.raises(expected) as raised:
        close_connector(source.fail())
    assert isinstance(raised.value, ConnectorError) and raised.value.status == status


def test_a_misspelt_key_is_a_configuration_error(source: Source) -> None:
    kind = source.connector.config.type  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError, match="intervall_s") as raised:
        build_connector({"type": kind, "name": "x", "intervall_s": 60})
    assert raised.value.status == ConnectorStatus.INVALID_CONFIGURATION


#: Key names that hold a secret (``bearer_token``, ``client_secret``, ``aws_access_key_id``…; not
#: ``token_scope`` or ``credentials_file``): such a key must be a ``SecretStr``.
SECRET_KEY = re.compile(r"(password|secret|token|key_id|access_key|api_key)$")


def test_reprs_never_show_a_secret(source: Source) -> None:
    connector: Any = source.connector
    model = type(connector).config_model
    secrets = {name: str(f.annotation) for name, f in model.model_fields.items() if SECRET_KEY.search(name)}
    if not secrets:
        assert source.not_applicable["secrets"]  # a case must say why
        return
    assert {name: "SecretStr" in kind for name, kind in secrets.items()} == dict.fromkeys(secrets, True)
    marked = connector.config.model_copy(update={name: SecretStr(f"s3cr3t-{name}") for name in secrets})
    shown = repr(marked) + str(marked) + repr(connector)
    assert [name for name in secrets if f"s3cr3t-{name}" in shown] == []
