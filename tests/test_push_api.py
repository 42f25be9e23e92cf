"""``POST /api/v1/batches`` and the ``agent`` connector reading what was pushed."""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, func, select, update
from starlette.testclient import TestClient

from connectors.base import ConfigurationError, DeviceInfo, WorkloadInfo
from connectors.registry import default_registry
from service.agent_source import AgentConfig, AgentConnector
from service.app import create_app
from service.models import PushedBatch, PushedDevice, PushedSample, PushedWorkload
from service.settings import Settings

TOKEN_A, TOKEN_B = "a" * 32, "b" * 32
T0 = 1_757_462_400_000  # 2025-09-10T00:00Z
NOW = dt.datetime(2025, 9, 10, 6, tzinfo=dt.UTC)  # the push endpoint's clock


def _settings(engine: Engine) -> Settings:
    return Settings(
        database_url=str(engine.url),
        auth={"anonymous_read": True},  # /metrics read anonymously; pushing still needs a token
        connectors=[
            {"type": "agent", "name": "node-a", "token": TOKEN_A},
            {"type": "agent", "name": "node-b", "token": TOKEN_B},
        ],
    )


@pytest.fixture
def client(engine: Engine) -> Any:
    async def no_graphql(scope: Any, receive: Any, send: Any) -> None:  # not under test here
        raise AssertionError("graphql not expected")

    with TestClient(create_app(_settings(engine), engine, graphql_app=no_graphql, clock=lambda: NOW)) as c:
        yield c


def batch(seq: int = 1, agent: str = "node-a", n: int = 3, team: str = "research") -> dict[str, Any]:
    return {
        "batch_id": f"{agent}-host:{seq}",
        "agent": agent,
        "devices": [
            {"device_id": "GPU-1", "environment": "onprem", "gpu_model": "NVIDIA H200", "gpu_index": 0}
        ],
        "workloads": [{"workload_key": "k8s:ns/p/c", "team": team, "namespace": "ns", "workload": "p"}],
        "samples": {
            "device_id": ["GPU-1"] * n,
            "ts_ms": [T0 + seq * 60_000 + k * 5000 for k in range(n)],
            "metric": ["gpu_util"] * n,
            "value": [float(10 * k) for k in range(n)],
            "workload_key": ["k8s:ns/p/c"] * n,
            "share": [1.0] * n,
        },
    }


def post(client: TestClient, body: Any, token: str | None = TOKEN_A) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.post("/api/v1/batches", json=body, headers=headers)


def _count(engine: Engine, model: Any) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(model.__table__)).scalar_one()


def test_auth(client: TestClient, engine: Engine) -> None:
    r = post(client, batch(), token=None)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert post(client, batch(), token="x" * 32).status_code == 403
    r = post(client, batch(agent="node-a"), token=TOKEN_B)  # a valid token, of another agent
    assert r.status_code == 403 and r.json()["field"] == "agent"
    assert _count(engine, PushedBatch) == 0


def test_accept_then_replay_is_a_duplicate(client: TestClient, engine: Engine) -> None:
    r = post(client, batch())
    assert (r.status_code, r.json()) == (200, {"batch_id": "node-a-host:1", "duplicate": False, "samples": 3})
    r = post(client, batch())
    assert (r.status_code, r.json()["duplicate"]) == (200, True)
    assert (_count(engine, PushedBatch), _count(engine, PushedSample)) == (1, 3)
    exposition = client.app.state.telemetry.render().decode()  # what /metrics shows (it needs a token)
    metrics = {
        (s.name, s.labels.get("agent"), s.labels.get("outcome")): s.value
        for f in text_string_to_metric_families(exposition)
        for s in f.samples
        if s.name.startswith("gpu_ledger_push")
    }
    assert metrics[("gpu_ledger_push_batches_total", "node-a", "accepted")] == 1
    assert metrics[("gpu_ledger_push_batches_total", "node-a", "duplicate")] == 1
    assert metrics[("gpu_ledger_push_samples_total", "node-a", None)] == 3


def test_an_idle_gpu_batch_is_accepted(client: TestClient, engine: Engine) -> None:
    # A GPU nobody holds reports workload '' — the batch is good data, not a malformed one
    # (found on the H200: the agent quarantined every batch with a second of idle time).
    body = batch()
    body["workloads"].append({"workload_key": ""})
    body["samples"]["workload_key"] = ["", "", "k8s:ns/p/c"]
    r = post(client, body)
    assert (r.status_code, r.json()["duplicate"]) == (200, False)
    assert (_count(engine, PushedSample), _count(engine, PushedWorkload)) == (3, 1)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda b: b["samples"]["ts_ms"].__setitem__(1, 1.5), "samples.ts_ms.1"),
        (lambda b: b["samples"]["metric"].__setitem__(0, "gpu_utilization"), "samples.metric.0"),
        (lambda b: b["samples"]["value"].pop(), "samples"),
        (lambda b: b["samples"]["device_id"].__setitem__(2, "GPU-9"), "samples.device_id.2"),
        (lambda b: b.pop("batch_id"), "batch_id"),
        (lambda b: b.__setitem__("batch_id", "no-sequence"), "batch_id"),
        (lambda b: b["devices"][0].__setitem__("environment", "moon"), "devices.0.environment"),
        (lambda b: b.__setitem__("extra", 1), "extra"),
    ],
)
def test_bad_batches_name_the_field(client: TestClient, engine: Engine, mutate: Any, field: str) -> None:
    body = batch()
    mutate(body)
    r = post(client, body)
    assert r.status_code == 400, r.text
    assert r.json()["field"] == field and field.split(".")[0] in r.json()["error"]
    assert _count(engine, PushedBatch) == 0


def test_not_json(client: TestClient) -> None:
    r = client.post("/api/v1/batches", content=b"{nope", headers={"Authorization": f"Bearer {TOKEN_A}"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]


def test_connector_reads_its_own_samples_columnar(client: TestClient, engine: Engine) -> None:
    assert post(client, batch(1)).status_code == 200
    assert post(client, batch(2, team="ads")).status_code == 200  # the workload's new team wins
    other = batch(1, agent="node-b")
    assert post(client, other, token=TOKEN_B).status_code == 200
    config = default_registry().validate({"type": "agent", "name": "node-a", "token": TOKEN_A})
    connector = default_registry().build(config, engine=engine, clock=lambda: NOW)
    assert connector.sampling.period_s == 5.0 and connector.sampling.max_gap_s == 10.0
    start, end = dt.datetime(2025, 9, 10, tzinfo=dt.UTC), dt.datetime(2025, 9, 10, 0, 2, 5, tzinfo=dt.UTC)
    (got,) = list(connector.collect(start, end))  # [T0+60 s, T0+125 s): batch 1 and the first of batch 2
    assert got.samples.sort("ts_ms")["ts_ms"].to_list() == [
        T0 + 60_000,
        T0 + 65_000,
        T0 + 70_000,
        T0 + 120_000,
    ]
    assert got.samples.schema == pl.Schema(
        {"device_id": pl.String, "ts_ms": pl.Int64, "metric": pl.String, "value": pl.Float64,
         "workload_key": pl.String, "share": pl.Float64}
    )  # fmt: skip
    assert got.devices == [DeviceInfo("GPU-1", "onprem", gpu_model="NVIDIA H200", gpu_index=0)]
    assert got.workloads == [WorkloadInfo("k8s:ns/p/c", team="ads", namespace="ns", workload="p")]
    assert connector.discover() == got.devices
    empty = list(connector.collect(start - dt.timedelta(days=1), start))
    assert empty == []


def test_prune_after_retention(client: TestClient, engine: Engine) -> None:
    assert post(client, batch(1)).status_code == 200
    assert post(client, batch(2)).status_code == 200
    long_ago = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    with engine.begin() as conn:  # batch 1 arrived long ago; its device/workload rows too
        conn.execute(update(PushedBatch.__table__).where(PushedBatch.batch_id == "node-a-host:1").values(
            received_at=long_ago))  # fmt: skip
    config = AgentConfig(name="node-a", token=TOKEN_A, retention_days=7)
    connector = AgentConnector(config, engine=engine, clock=lambda: NOW)
    assert connector.prune() == 1
    assert (_count(engine, PushedBatch), _count(engine, PushedSample)) == (1, 3)
    assert (_count(engine, PushedDevice), _count(engine, PushedWorkload)) == (1, 1)  # updated by batch 2
    assert connector.prune() == 0  # at most once an hour


def test_agent_connector_needs_the_database() -> None:
    with pytest.raises(ConfigurationError, match="engine"):
        AgentConnector(AgentConfig(name="node-a", token=TOKEN_A))


def test_short_token_is_a_config_error() -> None:
    with pytest.raises(Exception, match="token"):
        default_registry().validate({"type": "agent", "name": "n", "token": "short"})


def test_late_backlog_moves_the_watermark_back(client: TestClient, engine: Engine) -> None:
    from service.db import session_scope
    from service.models import ConnectorState
    from service.timeutil import from_ms

    first = from_ms(T0 + 60_000)  # batch(1)'s first reading
    with session_scope(engine) as session:
        session.add(
            ConnectorState(name="node-a", type="agent", status="OK", watermark=first + dt.timedelta(hours=5))
        )
    assert post(client, batch(1)).status_code == 200  # 5 h late: beyond the catch-up window's reach
    with session_scope(engine) as session:
        state = session.get(ConnectorState, "node-a")
        assert state is not None and state.watermark == first + dt.timedelta(hours=1)  # + presence gap
        state.watermark = first + dt.timedelta(minutes=30)
        session.add(state)
    assert post(client, batch(2)).status_code == 200  # within reach: left alone
    with session_scope(engine) as session:
        state = session.get(ConnectorState, "node-a")
        assert state is not None and state.watermark == first + dt.timedelta(minutes=30)
