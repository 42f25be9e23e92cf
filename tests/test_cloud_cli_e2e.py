"""Issue 4 end to end: each cloud connector runs from the config file through ``gpu-ledger ingest
NAME`` — a real process, with the production credential flows — and its GPUs answer ``usage``,
``effectiveCost`` and ``idleWaste`` next to on-prem ones.

* ``aws`` (cloudwatch): static keys against moto's server; one p5.48xlarge GPU at 50 % all hour.
* ``gcp`` (gcp_monitoring): a service-account key file (the client signs its own JWT) over TLS to
  an in-process ``ListTimeSeries`` server; two GPUs of one instance at 100 % and 0 %.
* ``azure`` (azure_monitor): a service principal whose token comes from a fake Azure AD
  (``authority_host``: OpenID discovery, then the client-credentials grant) and Log Analytics rows
  (the shared InsightsMetrics fixture, moved to the test's hour) over HTTPS.
* ``onprem`` (synthetic): the demo fleet for the same hour.

Rate cards price each cloud; every figure below is hand-computed.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import trustme
from awsfake.server import KEY_ID, SECRET, moto_server, put_points
from azurefake.server import Reply, Request, fake_azure, inventory_table
from gcpfake.build import series
from gcpfake.server import FakeMetricService, running_fake
from starlette.testclient import TestClient

from service.app import create_app
from service.db import make_engine
from service.settings import load_settings
from service.timeutil import floor_hour

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # gpu-ledger ingest in a subprocess per cloud

NOW = dt.datetime.now(dt.UTC)
H = floor_hour(NOW) - dt.timedelta(hours=3)  # recent: CloudWatch keeps 1-minute data 15 days
MINUTES = [H + dt.timedelta(minutes=m) for m in range(60)]
AWS_INSTANCE, GCP_INSTANCE = "i-0e2e0000000000001", "4815162342108301234"
AZURE_FIXTURE = Path(__file__).parent / "fixtures" / "azure" / "log_analytics_query_insightsmetrics_gpu.json"
AZURE_FIXTURE_HOUR = dt.datetime(2025, 9, 20, 10, tzinfo=dt.UTC)
AZURE_SUBSCRIPTION = "6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f"
TENANT, CLIENT, SECRET_VALUE = "11111111-2222-3333-4444-555555555555", "app-id", "s3cr3t-value"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    import boto3

    with moto_server() as endpoint:
        cw = boto3.client(
            "cloudwatch", region_name="us-east-1", endpoint_url=endpoint,
            aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET,
        )  # fmt: skip
        dims = {"index": "0", "name": "NVIDIA H100 80GB HBM3", "host": "ip-10-0-0-1",
                "InstanceId": AWS_INSTANCE, "InstanceType": "p5.48xlarge"}  # fmt: skip
        put_points(cw, "CWAgent", "nvidia_smi_utilization_gpu", dims, MINUTES, [50.0] * 60)
        cw.close()
        yield endpoint


@pytest.fixture
def gcp(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """(endpoint, CA file, service-account key file)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    roots = tmp_path / "gcp-ca.pem"
    ca.cert_pem.write_to_path(str(roots))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    key_file = tmp_path / "sa.json"
    key_file.write_text(json.dumps({
        "type": "service_account", "project_id": "ml-prod", "private_key_id": "k1", "private_key": pem,
        "client_email": "ledger@ml-prod.iam.gserviceaccount.com", "client_id": "1",
        "token_uri": "https://127.0.0.1:9/token",  # never called: gRPC clients sign their own JWT
    }))  # fmt: skip
    ends = [m + dt.timedelta(minutes=1) for m in MINUTES]  # ALIGN_MEAN points are stamped at their end
    resource = {"project_id": "ml-prod", "instance_id": GCP_INSTANCE, "zone": "us-central1-a"}
    held = [
        series("agent.googleapis.com/gpu/utilization", resource,
               {"gpu_number": str(i), "model": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-g{i}"},
               ends, [util] * 60)
        for i, util in enumerate((100.0, 0.0))
    ]  # fmt: skip
    tls = (b"".join(blob.bytes() for blob in leaf.cert_chain_pems), leaf.private_key_pem.bytes())
    with running_fake(FakeMetricService({"ml-prod": held}, period_s=60), tls=tls) as target:
        yield target, roots, key_file


def _azure_rows() -> dict[str, Any]:
    body = json.loads(AZURE_FIXTURE.read_text())
    shift = H - AZURE_FIXTURE_HOUR
    for row in body["tables"][0]["rows"]:
        when = dt.datetime.fromisoformat(row[0].replace("Z", "+00:00")) + shift
        row[0] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return body


@pytest.fixture
def azure(tmp_path: Path) -> Iterator[Any]:
    body = _azure_rows()

    def respond(request: Request) -> Reply:
        base = fake.url
        if request.path.endswith("/.well-known/openid-configuration"):  # MSAL's tenant discovery
            return Reply(body={
                "token_endpoint": f"{base}/{TENANT}/oauth2/v2.0/token",
                "authorization_endpoint": f"{base}/{TENANT}/oauth2/v2.0/authorize",
                "issuer": f"{base}/{TENANT}/v2.0",
            })  # fmt: skip
        if request.path == f"/{TENANT}/oauth2/v2.0/token":
            form = dict(p.split("=", 1) for p in request.body.split("&"))
            if form.get("client_secret") != SECRET_VALUE or form.get("grant_type") != "client_credentials":
                return Reply(401, {"error": "invalid_client"})
            return Reply(body={"token_type": "Bearer", "expires_in": 3600, "access_token": "aad-token"})
        if request.path.startswith("/v1/workspaces/"):
            if request.headers.get("authorization") != "Bearer aad-token":
                return Reply(401, {"error": {"code": "InvalidAuthenticationToken", "message": "no"}})
            if request.body["query"].lstrip().startswith("KubePodInventory"):
                return Reply(body={"tables": [inventory_table([])]})  # none of the fixture's pods
            first, last = request.body["timespan"].split("/")
            table = copy.deepcopy(body["tables"][0])
            table["rows"] = [r for r in table["rows"] if first <= r[0] < last]
            return Reply(body={"tables": [table]})
        return Reply(404, {"error": {"code": "NotFound", "message": request.path}})

    with fake_azure(tmp_path, respond) as fake:
        yield fake


def _config(tmp_path: Path, aws: str, gcp: tuple[str, Path, Path], azure: Any) -> Path:
    path = tmp_path / "gpu-ledger.toml"
    path.write_text(f"""
database_url = "sqlite:///{tmp_path / "ledger.db"}"

[[connectors]]
name = "onprem"
type = "synthetic"

[[connectors]]
name = "aws"
type = "cloudwatch"
regions = ["us-east-1"]
endpoint_url = "{aws}"
aws_access_key_id = "{KEY_ID}"
aws_secret_access_key = "{SECRET}"
account_id = "123456789012"
max_retries = 0

[[connectors]]
name = "gcp"
type = "gcp_monitoring"
projects = ["ml-prod"]
api_endpoint = "{gcp[0]}"
credentials_file = "{gcp[2]}"
families = ["ops_agent"]
max_retries = 0

[[connectors]]
name = "azure"
type = "azure_monitor"
workspace_id = "0b1f3c5e-aaaa-bbbb-cccc-000000000001"
subscription_id = "{AZURE_SUBSCRIPTION}"
region = "eastus"
tenant_id = "{TENANT}"
client_id = "{CLIENT}"
client_secret = "{SECRET_VALUE}"
authority_host = "{azure.url}"
logs_endpoint = "{azure.url}"
ca_file = "{azure.ca_path}"
max_retries = 0

[[rate_cards]]
name = "p5"
environment = "aws"
instance_type = "p5.48xlarge"
rate_per_gpu_hour = "6.88"
currency = "USD"
valid_from = "2020-01-01T00:00:00Z"

[[rate_cards]]
name = "gcp"
environment = "gcp"
rate_per_gpu_hour = "11.06"
currency = "USD"
valid_from = "2020-01-01T00:00:00Z"

[[rate_cards]]
name = "azure"
environment = "azure"
rate_per_gpu_hour = "12.29"
currency = "USD"
valid_from = "2020-01-01T00:00:00Z"
""")
    return path


def _ingest(config: Path, name: str, env: dict[str, str]) -> str:
    cli = Path(sys.executable).with_name("gpu-ledger")
    command = [str(cli), "ingest", name, "--config", str(config),
               "--start", H.isoformat(), "--end", (H + dt.timedelta(hours=1)).isoformat()]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{name}: {done.stdout}\n{done.stderr}"
    for secret in (SECRET, SECRET_VALUE):  # never in the output or the logs
        assert secret not in done.stdout and secret not in done.stderr
    return done.stdout


def test_cloud_connectors_run_from_config_and_answer_next_to_onprem(
    tmp_path: Path, aws: str, gcp: tuple[str, Path, Path], azure: Any
) -> None:
    config = _config(tmp_path, aws, gcp, azure)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GOOGLE_", "AZURE_"))}
    env |= {
        "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(gcp[1]),  # the gRPC channel verifies the fake with it
        "REQUESTS_CA_BUNDLE": azure.ca_path,  # azure-identity's token requests
    }  # fmt: skip
    for name in ("onprem", "aws", "gcp", "azure"):
        assert _ingest(config, name, env).startswith(f"{name}: ")
    # The service principal got its token from the fake Azure AD and used it.
    assert any(r.path == f"/{TENANT}/oauth2/v2.0/token" for r in azure.requests)

    settings = load_settings(config)
    engine = make_engine(settings.database_url)
    try:
        reader = settings.model_copy(update={"auth": settings.auth.with_anonymous_read()})
        with TestClient(create_app(reader, engine)) as client:
            window = {"start": H.isoformat(), "end": (H + dt.timedelta(hours=1)).isoformat()}
            query = """query($w: TimeWindow!) {
              connectors { name type status lastError }
              usage(window: $w, groupBy: [ENVIRONMENT, ACCOUNT]) {
                environment account gpuHours effectiveGpuHours idleGpuHours }
              effectiveCost(window: $w, groupBy: [ENVIRONMENT, ACCOUNT]) {
                environment account cost { amount currency } costPerEffectiveGpuHour { amount } }
              idleWaste(window: $w, groupBy: [ENVIRONMENT, ACCOUNT]) {
                environment account idleCost { amount } }
            }"""
            reply = client.post("/graphql", json={"query": query, "variables": {"w": window}}).json()
    finally:
        engine.dispose()
    assert "errors" not in reply, reply
    assert {c["name"]: c["status"] for c in reply["data"]["connectors"]} == dict.fromkeys(
        ("onprem", "aws", "gcp", "azure"), "OK"
    )
    assert SECRET not in json.dumps(reply) and SECRET_VALUE not in json.dumps(reply)
    # The connectors' accounts; the demo fleet's own cloud GPUs live in other accounts.
    usage = {(r["environment"], r["account"]): r for r in reply["data"]["usage"]}
    cost = {(r["environment"], r["account"]): r for r in reply["data"]["effectiveCost"]}
    idle = {(r["environment"], r["account"]): r for r in reply["data"]["idleWaste"]}
    aws_, gcp_, azure_ = ("aws", "123456789012"), ("gcp", "ml-prod"), ("azure", AZURE_SUBSCRIPTION)

    def hours(key: tuple[str, str]) -> tuple[float, float, float]:
        r = usage[key]
        return (round(r["gpuHours"], 6), round(r["effectiveGpuHours"], 6), round(r["idleGpuHours"], 6))

    assert usage[("onprem", None)]["gpuHours"] > 0  # on-prem GPUs answer side by side
    # AWS: one GPU all hour at 50 %: 1 GPU-hour, 0.5 effective, nothing idle; 6.88 by the rate card.
    assert hours(aws_) == (1.0, 0.5, 0.0)
    assert Decimal(cost[aws_]["cost"]["amount"]) == Decimal("6.88")
    assert Decimal(cost[aws_]["costPerEffectiveGpuHour"]["amount"]) == Decimal("13.76")
    # GCP: two GPUs, at 100 % and at 0 %: 2 GPU-hours, 1 effective, 1 idle (11.06 of idle cost).
    assert hours(gcp_) == (2.0, 1.0, 1.0)
    assert Decimal(cost[gcp_]["cost"]["amount"]) == Decimal("22.12")
    assert Decimal(idle[gcp_]["idleCost"]["amount"]) == Decimal("11.06")
    # Azure: 16 GPU slots present 5 minutes (4,800 s); the 14 allocated ones report duty cycle,
    # busy Σ duty % × 60 s / 100 = 2,856 s; the 2 free slots are unobserved, never idle.
    assert hours(azure_) == (round(4800 / 3600, 6), round(2856 / 3600, 6), 0.0)
    # 12.29 × 300 s / 3600 s per slot, rounded to the ledger's 1e-9 once per row, × 16 rows.
    assert Decimal(cost[azure_]["cost"]["amount"]) == 16 * Decimal("1.024166667")
