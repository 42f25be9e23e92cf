"""Instance tags as attribution facts, from the clouds' own APIs through the real clients.

EC2: ``DescribeInstances`` on moto's server (instances made with ``RunInstances`` +
``TagSpecifications``), read by the ``cloudwatch`` connector for the GPUs its metrics name.
Compute Engine: ``metadata.user_labels`` of ``gce_instance`` series, asked for by key through
``ListTimeSeries``' reduction, from the in-process gRPC fake (tests/gcpfake).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from awsfake.fixtures import cloudwatch_config
from awsfake.server import CallLog, put_points
from gcpfake.build import plain_client, series
from gcpfake.server import FakeMetricService, running_fake
from pydantic import ValidationError

from connectors.cloud_tags import MAX_CHARS, facts
from connectors.cloudwatch import CloudWatchConnector, client_factory
from connectors.gcp_monitoring import GcpMonitoringConfig, GcpMonitoringConnector

H10 = dt.datetime(2026, 3, 2, 10, tzinfo=dt.UTC)
M = dt.timedelta(minutes=1)


def test_facts_are_prefixed_bounded_and_sorted() -> None:
    pairs = [("team", "llm"), ("", "x"), ("owner", None), ("bad\nkey", "v"), ("long", "v" * (MAX_CHARS + 1)),
             ("Project", "pretrain-70b"), (None, "x"), ("n", 7)]  # fmt: skip
    assert facts(pairs) == {"cloud.tag:Project": "pretrain-70b", "cloud.tag:n": "7", "cloud.tag:team": "llm"}
    assert facts([("agentpool", "gpu")], "k8s.node_label:") == {"k8s.node_label:agentpool": "gpu"}
    many = facts((f"k{i:03d}", "v") for i in range(250))
    assert len(many) == 200 and min(many) == "cloud.tag:k000" and max(many) == "cloud.tag:k199"


def _gpu(cloudwatch: Any, instance_id: str, index: int, **dims: str) -> None:
    put_points(
        cloudwatch,
        "CWAgent",
        "nvidia_smi_utilization_gpu",
        {"index": str(index), "InstanceId": instance_id, "host": f"host-{index}", **dims},
        [H10 + m * M for m in range(5)],
        [50.0] * 5,
    )


def _tagged(ec2: Any, instance_type: str, tags: dict[str, str]) -> str:
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    more = {"TagSpecifications": spec} if tags else {}
    made = ec2.run_instances(
        ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType=instance_type, **more
    )
    return str(made["Instances"][0]["InstanceId"])


def _devices(connector: CloudWatchConnector) -> dict[str, Any]:
    return {d.device_id: d for b in connector.collect(H10, H10 + 5 * M) for d in b.devices}


def test_ec2_describe_instances_tags_become_device_facts(moto: str, aws_client: Callable[..., Any]) -> None:
    ec2, cloudwatch = aws_client("ec2"), aws_client("cloudwatch")
    tagged = _tagged(ec2, "p5.48xlarge", {"team": "llm-research", "Project": "pretrain-70b",
                                          "cost-center": "cc-1042", "huge": "x" * 301})  # fmt: skip
    plain = _tagged(ec2, "g5.xlarge", {})
    _gpu(cloudwatch, tagged, 0, InstanceType="p5.48xlarge")  # the type in the dimension: tags still read
    _gpu(cloudwatch, tagged, 1, InstanceType="p5.48xlarge")
    _gpu(cloudwatch, plain, 0)
    _gpu(cloudwatch, "i-0ffffffffffffffff", 0, InstanceType="p4d.24xlarge")  # terminated long ago
    calls = CallLog()
    config = cloudwatch_config(moto)

    def make_client(session: Any, service: str, region: str) -> Any:
        made = client_factory(config)(session, service, region)
        if service == "ec2":
            made.meta.events.register("before-parameter-build.ec2.DescribeInstances", calls._before)
        return made

    with CloudWatchConnector(config, make_client=make_client, clock=lambda: H10 + M * 30) as connector:
        devices = _devices(connector)
        again = _devices(connector)
    owner = {
        "cloud.tag:Project": "pretrain-70b",
        "cloud.tag:cost-center": "cc-1042",
        "cloud.tag:team": "llm-research",
    }  # fmt: skip  (the 301-character value is left out)
    assert devices[f"{tagged}/gpu0"].tags == owner
    assert devices[f"{tagged}/gpu1"].tags == owner
    assert devices[f"{plain}/gpu0"].tags == {}
    assert devices[f"{plain}/gpu0"].instance_type == "g5.xlarge"
    assert devices["i-0ffffffffffffffff/gpu0"].tags == {}
    assert devices["i-0ffffffffffffffff/gpu0"].instance_type == "p4d.24xlarge"
    assert again == devices
    assert len(calls.calls) == 1  # all three instances in one call, cached for the second window


def test_instance_tags_off_reads_no_tags_and_asks_ec2_only_for_missing_types(
    moto: str,
    aws_client: Callable[..., Any],
) -> None:
    ec2, cloudwatch = aws_client("ec2"), aws_client("cloudwatch")
    typed = _tagged(ec2, "p5.48xlarge", {"team": "a"})
    untyped = _tagged(ec2, "g5.xlarge", {"team": "b"})
    _gpu(cloudwatch, typed, 0, InstanceType="p5.48xlarge")
    _gpu(cloudwatch, untyped, 0)
    calls = CallLog()
    config = cloudwatch_config(moto, instance_tags=False)

    def make_client(session: Any, service: str, region: str) -> Any:
        made = client_factory(config)(session, service, region)
        if service == "ec2":
            made.meta.events.register("before-parameter-build.ec2.DescribeInstances", calls._before)
        return made

    with CloudWatchConnector(config, make_client=make_client, clock=lambda: H10 + M * 30) as connector:
        devices = _devices(connector)
    assert {d: (i.instance_type, dict(i.tags)) for d, i in devices.items()} == {
        f"{typed}/gpu0": ("p5.48xlarge", {}),
        f"{untyped}/gpu0": ("g5.xlarge", {}),
    }
    assert [c["Filters"][0]["Values"] for c in calls.calls] == [[untyped]]


# --- Compute Engine labels: Cloud Monitoring metadata.user_labels over the in-process gRPC fake ----

GCE_PROJECT, A3 = "ml-prod-123456", "4815162342108301234"


def test_gce_user_labels_become_device_facts() -> None:
    a3 = {"project_id": GCE_PROJECT, "instance_id": A3, "zone": "us-central1-a"}
    h100 = {"gpu_number": "1", "model": "NVIDIA H100 80GB HBM3", "uuid": "GPU-a3a3"}
    labels = {"team": "llm-research", "cost-center": "cc-1042", "env": "prod"}
    ends = [H10 + (m + 1) * M for m in range(5)]
    w = "workload.googleapis.com/gpu.dcgm."
    fleet = [
        series(w + "utilization", a3, h100, ends, [0.5] * 5, user_labels=labels),
        # the energy counter is read raw (no reduction), so it carries no metadata at all
        series(
            w + "energy_consumption",
            a3,
            h100,
            ends,
            [1000, 2000, 3000, 4000, 5000],
            cumulative_since=[H10] * 5,
        ),
    ]
    service = FakeMetricService({GCE_PROJECT: fleet}, period_s=60)
    config = GcpMonitoringConfig(
        name="gcp", projects=[GCE_PROJECT], families=["dcgm"], user_labels=["team", "cost-center"]
    )
    with running_fake(service) as target, plain_client(target) as client:
        batches = list(GcpMonitoringConnector(config, client=client).collect(H10, H10 + 5 * M))
    (device,) = [d for b in batches for d in b.devices]
    assert device.device_id == f"{A3}/gpu1"
    assert device.tags == {
        "cloud.tag:cost-center": "cc-1042",
        "cloud.tag:team": "llm-research",
    }  # env: not asked
    grouped = [r for r in service.requests if r.aggregation.group_by_fields]
    assert grouped and all(
        list(r.aggregation.group_by_fields)[-2:]
        == ["metadata.user_labels.team", 'metadata.user_labels."cost-center"']
        for r in grouped
    )
    assert all("metadata.system_labels.name" not in r.aggregation.group_by_fields for r in grouped)


def test_gce_without_user_labels_asks_for_no_metadata() -> None:
    a3 = {"project_id": GCE_PROJECT, "instance_id": A3, "zone": "us-central1-a"}
    ends = [H10 + (m + 1) * M for m in range(5)]
    fleet = [series("workload.googleapis.com/gpu.dcgm.utilization", a3, {"gpu_number": "0"}, ends, [0.5] * 5,
                    user_labels={"team": "x"})]  # fmt: skip
    service = FakeMetricService({GCE_PROJECT: fleet}, period_s=60)
    config = GcpMonitoringConfig(name="gcp", projects=[GCE_PROJECT], families=["dcgm"])
    with running_fake(service) as target, plain_client(target) as client:
        batches = list(GcpMonitoringConnector(config, client=client).collect(H10, H10 + 5 * M))
    (device,) = [d for b in batches for d in b.devices]
    assert device.tags == {}
    assert not any(r.aggregation.group_by_fields for r in service.requests)


@pytest.mark.parametrize("key", ["Team", "1team", "cost center", "", "x" * 64, 'a"b'])
def test_gce_label_keys_are_checked(key: str) -> None:
    with pytest.raises(ValidationError, match="label key"):
        GcpMonitoringConfig(name="gcp", projects=[GCE_PROJECT], user_labels=[key])
