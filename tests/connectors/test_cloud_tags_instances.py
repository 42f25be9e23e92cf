"""Instance tags as attribution facts, from the clouds' own APIs through the real clients.

EC2: ``DescribeInstances`` on moto's server (instances made with ``RunInstances`` +
``TagSpecifications``), read by the ``cloudwatch`` connector for the GPUs its metrics name.
Compute Engine: ``metadata.user_labels`` of ``gce_instance`` series, asked for by key through
``ListTimeSeries``' reduction, from the in-process gRPC fake (tests/gcpfake). Azure: AKS node
labels from ``KubeNodeInventory`` (the recorded-format answers in tests/fixtures/recorded/azure)
through the real ``LogsQueryClient``, scale set tags from an ARM GET through azure-core's pipeline,
both over HTTPS to the fake (tests/azurefake).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from awsfake.fixtures import cloudwatch_config
from awsfake.server import CallLog, put_points
from azurefake.server import Reply, Request, StaticCredential, fake_azure
from gcpfake.build import plain_client, series
from gcpfake.server import FakeMetricService, running_fake
from pydantic import ValidationError
from sqlalchemy import select

from connectors.azure_monitor import AzureMonitorConfig, AzureMonitorConnector
from connectors.cloud_tags import MAX_CHARS, facts
from connectors.cloudwatch import CloudWatchConnector, client_factory
from connectors.gcp_monitoring import GcpMonitoringConfig, GcpMonitoringConnector
from connectors.sdk import FatalSourceError
from service.db import make_engine
from service.ledger.ingest import ingest_window
from service.models import Device

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


def _logging_ec2(config: Any, calls: CallLog) -> Callable[[Any, str, str], Any]:
    """The connector's clients, with EC2's DescribeInstances calls logged in ``calls``."""

    def make_client(session: Any, service: str, region: str) -> Any:
        made = client_factory(config)(session, service, region)
        if service == "ec2":
            made.meta.events.register("before-parameter-build.ec2.DescribeInstances", calls._before)
        return made

    return make_client


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
    clients = _logging_ec2(config, calls)
    with CloudWatchConnector(config, make_client=clients, clock=lambda: H10 + M * 30) as connector:
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
    clients = _logging_ec2(config, calls)
    with CloudWatchConnector(config, make_client=clients, clock=lambda: H10 + M * 30) as connector:
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


# --- Azure: AKS node labels (KubeNodeInventory) and scale set / VM tags (ARM), over HTTPS -----------

RECORDED_AZURE = Path(__file__).resolve().parent.parent / "fixtures" / "recorded" / "azure"
AKS_H10 = dt.datetime(2025, 9, 24, 10, tzinfo=dt.UTC)
AKS_NODE = "aks-a100pool-27182818-vmss000000"
VMSS = (
    "/subscriptions/0d9c8b7a-6f5e-4d3c-2b1a-0f9e8d7c6b5a/resourcegroups/mc_rg-ml_aks-ml-westeu_westeurope"
    "/providers/microsoft.compute/virtualmachinescalesets/aks-a100pool-27182818-vmss"
)
BOTH = {"node_labels": True, "resource_tags": True}
VMSS_TAGS = {"project": "nlp-pretrain", "cost-center": "cc-7", "aks-managed-poolName": "a100pool"}


def _azure(arm: dict[str, Reply]) -> Callable[[Request], Reply]:
    """Log Analytics (InsightsMetrics rows in the timespan, the pod and node inventories, each
    answering only what a query lists) and ARM GETs answered from ``arm`` (else 404)."""
    metrics = json.loads((RECORDED_AZURE / "log_analytics_insightsmetrics_gpu_requests.json").read_text())
    pods = json.loads((RECORDED_AZURE / "log_analytics_kubepodinventory_gpu_pods.json").read_text())
    nodes = json.loads((RECORDED_AZURE / "log_analytics_kubenodeinventory_gpu_nodes.json").read_text())

    def respond(request: Request) -> Reply:
        if request.method == "GET":
            return arm.get(request.path.lower(), Reply(404, {"error": {"code": "ResourceNotFound"}}))
        query = request.body["query"]
        if query.startswith("KubePodInventory"):
            return Reply(200, pods)
        if query.startswith("KubeNodeInventory"):
            listed = set(re.findall(r'"([^"]+)"', query.split("Computer in", 1)[1]))
            table = copy.deepcopy(nodes["tables"][0])
            table["rows"] = [r for r in table["rows"] if r[0] in listed]
            return Reply(200, {"tables": [table]})
        first, last = (
            dt.datetime.fromisoformat(t.replace("Z", "+00:00")) for t in request.body["timespan"].split("/")
        )
        table = copy.deepcopy(metrics["tables"][0])
        stamp = lambda text: dt.datetime.fromisoformat(text.replace("Z", "+00:00"))  # noqa: E731
        table["rows"] = [r for r in table["rows"] if first <= stamp(r[0]) < last]
        return Reply(200, {"tables": [table]})

    return respond


def _aks(url: str, ca: str, **extra: Any) -> AzureMonitorConnector:
    config = AzureMonitorConfig(name="aks", workspace_id="7e6d5c4b-3a29-4180-9f8e-7d6c5b4a3928",
                                region="westeurope", logs_endpoint=url, arm_endpoint=url, ca_file=ca,
                                max_retries=0, **extra)  # fmt: skip
    return AzureMonitorConnector(config, credential=StaticCredential("token"))


def test_aks_node_labels_and_scale_set_tags_become_device_facts(tmp_path: Path) -> None:
    arm = {VMSS: Reply(200, {"id": VMSS, "name": "aks-a100pool-27182818-vmss", "tags": VMSS_TAGS})}
    with fake_azure(tmp_path, _azure(arm)) as fake, _aks(fake.url, fake.ca_path, **BOTH) as connector:
        devices = [d for b in connector.collect(AKS_H10, AKS_H10 + dt.timedelta(hours=1)) for d in b.devices]
        again = [d for b in connector.collect(AKS_H10, AKS_H10 + dt.timedelta(hours=1)) for d in b.devices]
    assert sorted(d.device_id for d in devices) == [f"{AKS_NODE}/gpu{i}" for i in range(4)]
    tags = devices[0].tags
    assert all(d.tags == tags for d in devices) and again == devices
    assert tags["k8s.node_label:team"] == "nlp-research"
    assert tags["k8s.node_label:kubernetes.azure.com/agentpool"] == "a100pool"
    assert tags["k8s.node_label:node.kubernetes.io/instance-type"] == "Standard_NC96ads_A100_v4"
    assert {k: v for k, v in tags.items() if k.startswith("cloud.tag:")} == {
        "cloud.tag:project": "nlp-pretrain",
        "cloud.tag:cost-center": "cc-7",
        "cloud.tag:aks-managed-poolName": "a100pool",
    }
    node_queries = [
        r.body["query"]
        for r in fake.requests
        if r.method == "POST" and "KubeNodeInventory" in r.body["query"]
    ]
    assert len(node_queries) == 2 and f'"{AKS_NODE}"' in node_queries[0]
    gets = [r for r in fake.requests if r.method == "GET"]
    assert len(gets) == 1  # the scale set once per connector, not per window
    assert gets[0].query == {"api-version": ["2024-07-01"]}
    assert gets[0].headers["authorization"] == "Bearer token"


def test_aks_without_the_options_reads_no_labels_nor_tags(tmp_path: Path) -> None:
    with fake_azure(tmp_path, _azure({})) as fake, _aks(fake.url, fake.ca_path) as connector:
        devices = [d for b in connector.collect(AKS_H10, AKS_H10 + dt.timedelta(hours=1)) for d in b.devices]
    assert devices and all(d.tags == {} for d in devices)
    assert not [r for r in fake.requests if r.method == "GET" or "KubeNodeInventory" in r.body["query"]]


def test_a_deleted_scale_set_and_a_workspace_without_node_inventory_give_no_facts(tmp_path: Path) -> None:
    def respond(request: Request) -> Reply:
        if request.method == "POST" and request.body["query"].startswith("KubeNodeInventory"):
            message = (
                "'where' operator: Failed to resolve table or column expression named 'KubeNodeInventory'"
            )
            return Reply(400, {"error": {"code": "BadArgumentError", "message": message}})
        return _azure({})(request)  # the scale set: 404

    with fake_azure(tmp_path, respond) as fake, _aks(fake.url, fake.ca_path, **BOTH) as connector:
        devices = [d for b in connector.collect(AKS_H10, AKS_H10 + dt.timedelta(hours=1)) for d in b.devices]
    assert len(devices) == 4 and all(d.tags == {} for d in devices)


def test_arm_tags_refused_names_the_role(tmp_path: Path) -> None:
    def respond(request: Request) -> Reply:
        if request.method == "GET":
            return Reply(403, {"error": {"code": "AuthorizationFailed", "message": "no read"}})
        return _azure({})(request)

    with (
        fake_azure(tmp_path, respond) as fake,
        _aks(fake.url, fake.ca_path, resource_tags=True) as connector,
        pytest.raises(FatalSourceError, match="Reader"),
    ):
        list(connector.collect(AKS_H10, AKS_H10 + dt.timedelta(hours=1)))


A_POOL = {"n1": {"k8s.node_label:agentpool": "a"}}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[{"agentpool": "a"}]', A_POOL),  # the agent's form
        ('{"agentpool": "a"}', A_POOL),  # a bare object too
        ('[{"k": 1}]', {"n1": {}}),  # a label is a string
        ("not json", {}),
        ("[1]", {}),
        ("null", {}),
        ('[{"a": "b"}, {"c": "d"}]', {}),  # not one object
    ],
)
def test_node_labels_text_forms(text: str, expected: dict[str, dict[str, str]]) -> None:
    from types import SimpleNamespace

    from connectors.azure_node_inventory import labels

    table = SimpleNamespace(columns=["Computer", "Labels"], rows=[["n1", text], [None, text]])
    assert labels(SimpleNamespace(tables=[table])) == expected


def test_vm_tags_from_arm_become_device_facts(tmp_path: Path) -> None:
    from test_azure_monitor_vm import BODY, NAMESPACE, VM

    vm_tags = {"project": "pretrain-70b", "team": "llm-research", "cost-center": "cc-1042"}

    def respond(request: Request) -> Reply:
        if request.method == "GET":  # ARM ids are case-insensitive: the connector asks in lower case
            found = request.path == VM.lower()
            return Reply(200, {"id": VM, "tags": vm_tags}) if found else Reply(404, {})
        return Reply(200, BODY)

    with fake_azure(tmp_path, respond) as fake:
        config = AzureMonitorConfig(
            name="vms",
            region="eastus",
            metrics_endpoint=fake.url,
            arm_endpoint=fake.url,
            ca_file=fake.ca_path,
            max_retries=0,
            vm_resource_ids=(VM,),
            vm_metric_namespace=NAMESPACE,
            vm_metrics={"GPU Utilization": {"metric": "gpu_util"}},
            vm_gpu_dimension="gpu",
            resource_tags=True,
        )
        h10 = dt.datetime(2025, 9, 20, 10, tzinfo=dt.UTC)
        with AzureMonitorConnector(config, credential=StaticCredential("t")) as connector:
            devices = [d for b in connector.collect(h10, h10 + dt.timedelta(hours=1)) for d in b.devices]
    assert {d.device_id: d.tags for d in devices} == dict.fromkeys(
        ["ndh100-train-01/gpu0", "ndh100-train-01/gpu1"],
        {
            "cloud.tag:cost-center": "cc-1042",
            "cloud.tag:project": "pretrain-70b",
            "cloud.tag:team": "llm-research",
        },
    )
    assert [r.path for r in fake.requests if r.method == "GET"] == [VM.lower()]


def test_ec2_tags_are_kept_as_device_tags_through_the_ingest(
    moto: str, aws_client: Callable[..., Any], sqlite_url: str
) -> None:
    ec2, cloudwatch = aws_client("ec2"), aws_client("cloudwatch")
    tagged = _tagged(ec2, "p5.48xlarge", {"project": "pretrain-70b"})
    _gpu(cloudwatch, tagged, 0, InstanceType="p5.48xlarge")
    engine = make_engine(sqlite_url)
    try:
        with CloudWatchConnector(cloudwatch_config(moto), clock=lambda: H10 + M * 30) as connector:
            ingest_window(engine, "aws", connector, H10, H10 + dt.timedelta(hours=1))
        with engine.connect() as conn:
            stored = conn.execute(
                select(Device.tags).where(Device.device_id == f"{tagged}/gpu0")
            ).scalar_one()
    finally:
        engine.dispose()
    assert (json.loads(stored) if isinstance(stored, str) else stored) == {
        "cloud.tag:project": "pretrain-70b"
    }
