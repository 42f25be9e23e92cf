"""The Starlette app: health, readiness, metrics and the GraphQL mount."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from sqlalchemy import Engine
from starlette.responses import JSONResponse
from starlette.testclient import TestClient
from starlette.types import Receive, Scope, Send

from service.app import create_app
from service.db import make_engine, session_scope
from service.models import ConnectorState
from service.settings import Settings
from service.telemetry import Telemetry


async def stub_graphql(scope: Scope, receive: Receive, send: Send) -> None:
    await JSONResponse({"data": {"stub": True}})(scope, receive, send)


def _client(engine: Engine, **kw: object) -> TestClient:
    # Anonymous read: these tests are about the routes; tests/auth is about callers.
    settings = Settings(database_url=str(engine.url), auth={"anonymous_read": True})
    app = create_app(settings, engine, graphql_app=stub_graphql, **kw)  # type: ignore[arg-type]
    return TestClient(app)


def test_healthz(engine: Engine) -> None:
    with _client(engine) as client:
        r = client.get("/healthz")
    assert (r.status_code, r.json()) == (200, {"status": "ok"})


def test_readyz_on_migrated_database(engine: Engine) -> None:
    with _client(engine) as client:
        r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"


def test_readyz_on_unmigrated_database(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        with _client(engine) as client:
            r = client.get("/readyz")
    finally:
        engine.dispose()
    assert r.status_code == 503
    assert "gpu-ledger migrate" in r.json()["reason"]


def test_readyz_database_unreachable() -> None:
    engine = make_engine("postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=1")
    try:
        with _client(engine) as client:
            r = client.get("/readyz")
    finally:
        engine.dispose()
    assert r.status_code == 503 and "unreachable" in r.json()["reason"]


def test_graphql_is_routed(engine: Engine) -> None:
    with _client(engine) as client:
        r = client.post("/graphql", json={"query": "{ stub }"})
    assert r.json() == {"data": {"stub": True}}


def test_metrics(engine: Engine) -> None:
    now = dt.datetime(2025, 9, 10, 12, tzinfo=dt.UTC)
    with session_scope(engine) as session:
        session.add(
            ConnectorState(name="dc1", type="fake", status="OK", watermark=now - dt.timedelta(minutes=5))
        )
    telemetry = Telemetry(engine, clock=lambda: now)
    with _client(engine, telemetry=telemetry) as client:
        client.get("/healthz")
        client.get("/healthz")
        client.get("/no/such/path")
        text = client.get("/metrics").text
    assert 'gpu_ledger_http_requests_total{method="GET",route="/healthz",status="200"} 2.0' in text
    assert 'gpu_ledger_http_requests_total{method="GET",route="other",status="404"} 1.0' in text
    assert 'gpu_ledger_http_request_duration_seconds_count{method="GET",route="/healthz"} 2.0' in text
    assert 'gpu_ledger_connector_watermark_age_seconds{connector="dc1"} 300.0' in text


def test_real_graphql_app(engine: Engine) -> None:
    app = create_app(Settings(database_url=str(engine.url), auth={"anonymous_read": True}), engine)
    with TestClient(app) as client:
        r = client.post("/graphql", json={"query": "{ __typename }"})
        assert r.status_code == 200 and r.json()["data"]["__typename"] == "Query"
        assert client.get("/graphql", headers={"Accept": "text/html"}).status_code == 200  # GraphiQL


def test_metrics_count_refusals_and_clients_that_left(engine: Engine) -> None:
    """A 413 is counted as 413, a client that hangs up mid-body as 499, and neither as a 500."""
    import asyncio

    telemetry = Telemetry(engine)
    settings = Settings(
        database_url=str(engine.url), auth={"anonymous_read": True}, limits={"max_body_b": 10}
    )
    app = create_app(settings, engine, telemetry=telemetry)
    sent: list[dict[str, object]] = []

    async def call(body_parts: list[dict[str, object]]) -> None:
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": "/graphql", "raw_path": b"/graphql", "query_string": b"",
            "root_path": "", "client": ("127.0.0.1", 5), "server": ("127.0.0.1", 80),
            "headers": [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")],
        }  # fmt: skip
        messages = iter(body_parts)

        async def receive() -> dict[str, object]:
            return next(messages)

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        await app(scope, receive, send)

    asyncio.run(call([{"type": "http.request", "body": b"{" * 11, "more_body": True}]))
    left = [{"type": "http.request", "body": b"{", "more_body": True}, {"type": "http.disconnect"}]
    asyncio.run(call(left))
    text = telemetry.render().decode()
    assert 'gpu_ledger_http_requests_total{method="POST",route="/graphql",status="413"} 1.0' in text
    assert 'gpu_ledger_http_requests_total{method="POST",route="/graphql",status="499"} 1.0' in text
    assert 'status="500"' not in text
