"""``azure_prometheus`` against an HTTPS fake Azure Monitor workspace query endpoint.

The fake serves tests/fixtures/azure/managed_prometheus_query_range_dcgm_gpu_util.json (8 GPUs of
AKS node aks-ndh100-38117625-vmss000000, ``DCGM_FI_DEV_GPU_UTIL`` every 60 s, 10:00–10:04) for
``query_range`` on that field, an empty matrix for every other field, and answers 401 to any
request without ``Authorization: Bearer <the token>``.

With ``step_s = 60`` a reading stands for at most 120 s, so each GPU is observed 4 × 60 + 120 =
360 s (10:00–10:06). GPU 0 (UUID GPU-b3842287…, pod pretrain-70b-worker-0): util 88, 99, 97, 97,
96 % → busy 0.6 × (88 + 99 + 97 + 97) + 1.2 × 96 = 228.6 + 115.2 = 343.8 s. GPU 6: 0 % → idle 360 s.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import ClientAuthenticationError
from azurefake.server import Reply, Request, StaticCredential, fake_azure
from sqlalchemy import select

from connectors.azure_prometheus import AzurePrometheusConfig, AzurePrometheusConnector, AzureTokenAuth
from connectors.base import FatalSourceError
from service.db import make_engine
from service.ledger.ingest import ingest_window
from service.models import LedgerHour

FIXTURE = (
    Path(__file__).parent.parent / "fixtures" / "azure" / "managed_prometheus_query_range_dcgm_gpu_util.json"
)
H10 = dt.datetime(2025, 9, 20, 10, tzinfo=dt.UTC)
TOKEN = "amw-token-1"
GPU0, GPU6 = "GPU-b3842287-3945-ec43-8e90-305e669d4f4e", "GPU-0e96187e-f34c-e7a5-c230-ac7521a713d7"
TRAINER = "k8s:llm-train/pretrain-70b-worker-0/trainer"


def _workspace(request: Request) -> Reply:
    if request.headers.get("authorization") != f"Bearer {TOKEN}":
        return Reply(401, {"error": "unauthorized"})
    assert request.path == "/api/v1/query_range"
    if request.query["query"][0].startswith("last_over_time(DCGM_FI_DEV_GPU_UTIL["):
        return Reply(200, json.loads(FIXTURE.read_text()))
    return Reply(200, {"status": "success", "data": {"resultType": "matrix", "result": []}})


def _config(url: str, ca: str) -> AzurePrometheusConfig:
    return AzurePrometheusConfig(name="amw", url=url, ca_file=ca, step_s=60, max_retries=0, region="eastus")


def test_token_is_fetched_once_for_the_scope_and_readings_land(tmp_path: Path, sqlite_url: str) -> None:
    credential = StaticCredential(TOKEN)
    with (
        fake_azure(tmp_path, _workspace) as fake,
        AzurePrometheusConnector(_config(fake.url, fake.ca_path), credential=credential) as conn,
    ):
        engine = make_engine(sqlite_url)
        try:
            result = ingest_window(engine, "amw", conn, H10, H10 + dt.timedelta(hours=1))
            with engine.connect() as db:
                rows = {
                    (r["device_id"], r["workload_key"]): r
                    for r in db.execute(select(LedgerHour.__table__)).mappings()
                }
        finally:
            engine.dispose()
    assert credential.scopes == [("https://prometheus.monitor.azure.com/.default",)]  # cached afterwards
    assert len(fake.requests) > 1
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in fake.requests)
    assert result.devices == 8 and result.samples_read == 8 * 5
    gpu0 = rows[(GPU0, TRAINER)]
    assert (gpu0["present_s"], gpu0["observed_s"], gpu0["idle_s"]) == (360.0, 360.0, 0.0)
    assert gpu0["busy_s"] == pytest.approx(343.8, abs=1e-6)
    assert (gpu0["environment"], gpu0["region"], gpu0["cluster"]) == ("azure", "eastus", "aks-gpu-prod")
    gpu6 = rows[(GPU6, "")]
    assert (gpu6["observed_s"], gpu6["busy_s"], gpu6["idle_s"]) == (360.0, 0.0, 360.0)


def test_wrong_token_is_refused_and_fatal(tmp_path: Path) -> None:
    stale = StaticCredential("stale")
    with (
        fake_azure(tmp_path, _workspace) as fake,
        AzurePrometheusConnector(_config(fake.url, fake.ca_path), credential=stale) as conn,
        pytest.raises(FatalSourceError, match="HTTP 401"),
    ):
        list(conn.collect(H10, H10 + dt.timedelta(minutes=5)))
    assert fake.requests[0].headers["authorization"] == "Bearer stale"


def test_credential_failure_says_what_to_check(tmp_path: Path) -> None:
    class Refusing:
        def get_token(self, *scopes: str, **kwargs: object) -> object:
            raise ClientAuthenticationError("AADSTS7000215: Invalid client secret provided.")

    with (
        fake_azure(tmp_path, _workspace) as fake,
        AzurePrometheusConnector(_config(fake.url, fake.ca_path), credential=Refusing()) as conn,
        pytest.raises(FatalSourceError, match="AADSTS7000215.*Next step: check tenant_id/client_id"),
    ):
        list(conn.collect(H10, H10 + dt.timedelta(minutes=5)))
    assert fake.requests == []  # nothing is sent without a token


def test_token_is_refreshed_five_minutes_before_expiry() -> None:
    asked: list[str] = []

    class Expiring:  # every token expires at t = 10,000 s
        def get_token(self, *scopes: str, **kwargs: object) -> AccessToken:
            asked.append(scopes[0])
            return AccessToken(f"token-{len(asked)}", 10_000)

    now = [0.0]
    auth = AzureTokenAuth(Expiring(), "https://example/.default", clock=lambda: now[0])
    assert auth.token() == "token-1"
    now[0] = 9_699.0  # 301 s before expiry: still cached
    assert auth.token() == "token-1"
    now[0] = 9_700.0  # 300 s before expiry: refreshed
    assert auth.token() == "token-2"
    assert asked == ["https://example/.default"] * 2


def test_config_refuses_other_auth_and_masks_the_secret() -> None:
    with pytest.raises(ValueError, match="Azure AD"):
        AzurePrometheusConfig(
            name="amw", url="https://x.eastus.prometheus.monitor.azure.com", bearer_token="t"
        )
    config = AzurePrometheusConfig(
        name="amw", url="https://x", tenant_id="t", client_id="c", client_secret="s3cr3t-value"
    )
    assert config.environment == "azure" and config.type == "azure_prometheus"
    assert "s3cr3t-value" not in repr(config)
