"""The ``gcp_monitoring`` connector against the fake MetricService: paging, retries, errors,
several projects, configuration, and the production client path over TLS.

The data: instance ``111`` of project ``proj-a`` with 5 GPUs and instance ``222`` of ``proj-b``
with one, Ops Agent utilization at 10 % × (gpu + 1) for the minutes 10:00, 10:01, 10:02
(stamped at their ends 10:01–10:03).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import grpc
import polars as pl
import pytest
import trustme
from gcpfake.build import plain_client, series
from gcpfake.server import FakeMetricService, running_fake
from google.auth.credentials import AnonymousCredentials
from pydantic import ValidationError

from connectors.base import FatalSourceError, RetriableError, SampleBatch
from connectors.gcp_monitoring import GcpMonitoringConfig, GcpMonitoringConnector

H10 = dt.datetime(2025, 9, 15, 10, tzinfo=dt.UTC)
MIN = dt.timedelta(minutes=1)
UTIL = "agent.googleapis.com/gpu/utilization"
QUICK = {"max_retries": 2, "backoff_s": 0.01, "timeout_s": 5.0, "families": ["ops_agent"]}


def _instance(project: str, instance: str, gpus: int) -> list:
    resource = {"project_id": project, "instance_id": instance, "zone": "europe-west4-b"}
    ends = [H10 + (m + 1) * MIN for m in range(3)]
    return [
        series(
            UTIL,
            resource,
            {"gpu_number": str(g), "model": "NVIDIA L4", "uuid": f"GPU-{g}"},
            ends,
            [10.0 * (g + 1)] * 3,
        )  # fmt: skip
        for g in range(gpus)
    ]


@pytest.fixture
def fake() -> Iterator[tuple[FakeMetricService, str]]:
    service = FakeMetricService(
        {"proj-a": _instance("proj-a", "111", 5), "proj-b": _instance("proj-b", "222", 1)}, period_s=60
    )
    with running_fake(service) as target:
        yield service, target


def _collect(target: str, **config: object) -> list[SampleBatch]:
    settings = {"name": "gcp", "projects": ["proj-a"], **QUICK, **config}
    with (
        plain_client(target) as client,
        GcpMonitoringConnector(GcpMonitoringConfig(**settings), client=client) as c,
    ):
        return list(c.collect(H10, H10 + 5 * MIN))


def _util(batches: list[SampleBatch]) -> pl.DataFrame:
    return (
        pl.concat([b.samples for b in batches])
        .filter(pl.col("metric") == "gpu_util")
        .sort("device_id", "ts_ms")
    )


def test_pages_are_followed(fake: tuple[FakeMetricService, str]) -> None:
    service, target = fake
    util = _util(_collect(target, page_size=2))
    tokens = [r.page_token for r in service.requests if UTIL in r.filter]
    assert tokens == ["", "2", "4"]  # 5 series in pages of 2
    assert all(r.page_size == 2 for r in service.requests)
    assert util.height == 15
    assert util.group_by("device_id").agg(pl.col("value").sum()).sort("device_id").rows() == [
        (f"111/gpu{g}", 30.0 * (g + 1)) for g in range(5)
    ]
    # Stamped 10:01–10:03, the minutes are 10:00–10:02.
    assert sorted(set(util["ts_ms"].to_list())) == [int((H10 + m * MIN).timestamp() * 1000) for m in range(3)]


def test_transient_errors_are_retried(fake: tuple[FakeMetricService, str]) -> None:
    service, target = fake
    service.fail_next = [
        (grpc.StatusCode.UNAVAILABLE, "backend restarting"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "quota"),
        (grpc.StatusCode.INTERNAL, "oops"),
    ]
    util = _util(_collect(target, max_retries=3))
    assert util.height == 15
    assert [r.filter for r in service.requests[:4]] == [
        service.requests[0].filter
    ] * 4  # 3 failures + success


def test_persistent_unavailable_gives_retriable_error_quickly(fake: tuple[FakeMetricService, str]) -> None:
    service, target = fake
    service.fail_always = (grpc.StatusCode.UNAVAILABLE, "backend down")
    started = dt.datetime.now(dt.UTC)
    with pytest.raises(RetriableError, match=r"ServiceUnavailable: backend down \(after 3 tries\)"):
        _collect(target)
    assert len(service.requests) == 3  # max_retries = 2
    assert dt.datetime.now(dt.UTC) - started < dt.timedelta(seconds=2)


@pytest.mark.parametrize(
    ("code", "next_step"),
    [
        (
            grpc.StatusCode.PERMISSION_DENIED,
            r"grant .* roles/monitoring.viewer \(monitoring.timeSeries.list\) on project proj-a",
        ),
        (
            grpc.StatusCode.UNAUTHENTICATED,
            r"run `gcloud auth application-default login` or set credentials_file",
        ),
    ],
)
def test_auth_failures_are_fatal_with_next_step(
    fake: tuple[FakeMetricService, str], code: grpc.StatusCode, next_step: str
) -> None:
    service, target = fake
    service.fail_always = (code, "caller lacks access")
    with pytest.raises(FatalSourceError, match=rf"proj-a.*caller lacks access.*Next step: {next_step}"):
        _collect(target)
    assert len(service.requests) == 1  # not retried


def test_metric_never_written_is_empty_other_not_found_is_fatal(fake: tuple[FakeMetricService, str]) -> None:
    service, target = fake
    service.fail_always = (grpc.StatusCode.NOT_FOUND, f'Cannot find metric(s) that match type = "{UTIL}".')
    assert _collect(target) == []
    service.fail_always = (grpc.StatusCode.NOT_FOUND, "Requested entity was not found.")
    with pytest.raises(FatalSourceError, match="Requested entity was not found"):
        _collect(target)


def test_several_projects(fake: tuple[FakeMetricService, str]) -> None:
    service, target = fake
    batches = _collect(target, projects=["proj-a", "proj-b", "proj-empty"])
    assert [sorted({d.account for d in b.devices}) for b in batches] == [["proj-a"], ["proj-b"]]
    assert {d.device_id for d in batches[1].devices} == {"222/gpu0"}
    assert batches[1].devices[0].region == "europe-west4"
    assert _util(batches).height == 18
    assert {r.name for r in service.requests} == {"projects/proj-a", "projects/proj-b", "projects/proj-empty"}


def test_discover_reads_the_last_ten_minutes(fake: tuple[FakeMetricService, str]) -> None:
    service, target = fake
    config = GcpMonitoringConfig(name="gcp", projects=["proj-a"], **QUICK)
    with plain_client(target) as client:
        connector = GcpMonitoringConnector(config, client=client, clock=lambda: H10 + 8 * MIN)
        devices = connector.discover()
    assert sorted(d.device_id for d in devices) == [f"111/gpu{g}" for g in range(5)]
    assert {d.gpu_model for d in devices} == {"NVIDIA L4"}
    # 09:58–10:08 on the minute grid: points stamped 09:58 < T <= 10:08.
    interval = service.requests[0].interval
    assert (interval.start_time, interval.end_time) == (H10 - 2 * MIN, H10 + 8 * MIN)


def test_config() -> None:
    config = GcpMonitoringConfig(name="gcp", projects=["p-1"])
    assert config.families == ["ops_agent", "dcgm", "dcgm_v1", "gke_container", "gke_node"]
    assert (config.period_s, config.credentials_file, config.api_endpoint) == (60, None, None)
    for bad in ({"families": ["nvml"]}, {"projects": []}, {"projects": ["Bad Project"]}, {"regions": ["x"]}):
        with pytest.raises(ValidationError):
            GcpMonitoringConfig(name="gcp", **{"projects": ["p-1"], **bad})


def test_missing_credentials_file_is_an_auth_error(tmp_path: Path) -> None:
    config = GcpMonitoringConfig(name="gcp", projects=["p-1"], credentials_file=str(tmp_path / "nope.json"))
    with (
        GcpMonitoringConnector(config) as connector,
        pytest.raises(FatalSourceError, match="Next step: run `gcloud"),
    ):
        list(connector.collect(H10, H10 + MIN))


def test_production_path_over_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``api_endpoint`` + credentials build the real client and its secure channel (no injected transport)."""
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    roots = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(roots))
    # gRPC reads its default roots when the process makes its first secure channel.
    monkeypatch.setenv("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", str(roots))
    service = FakeMetricService({"proj-a": _instance("proj-a", "111", 2)}, period_s=60)
    tls = (b"".join(blob.bytes() for blob in leaf.cert_chain_pems), leaf.private_key_pem.bytes())
    with running_fake(service, tls=tls) as target:
        config = GcpMonitoringConfig(name="gcp", projects=["proj-a"], api_endpoint=target, **QUICK)
        with GcpMonitoringConnector(config, credentials=AnonymousCredentials()) as connector:
            util = _util(list(connector.collect(H10, H10 + 5 * MIN)))
    assert util.height == 6
    assert set(util["device_id"].to_list()) == {"111/gpu0", "111/gpu1"}
