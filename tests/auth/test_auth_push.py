"""Who may push batches: ``push:CONNECTOR`` tokens of the store, and (deprecated) the agent
connector's configured ``token`` key."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from service.app import create_app
from service.auth import push_callers
from service.auth.tokens import TokenStore
from service.db import make_engine
from service.settings import Settings

NOW = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC)
T0_MS = int((NOW - dt.timedelta(minutes=30)).timestamp() * 1000)
LEGACY = "legacy-token-0123456789"


def batch(agent: str, seq: int = 1) -> dict[str, Any]:
    return {
        "batch_id": f"{agent}-host:{seq}",
        "agent": agent,
        "devices": [{"device_id": "GPU-1", "environment": "onprem"}],
        "samples": {
            "device_id": ["GPU-1"],
            "ts_ms": [T0_MS + seq * 5000],
            "metric": ["gpu_util"],
            "value": [50.0],
            "workload_key": [""],
            "share": [1.0],
        },
    }


@pytest.fixture
def push(sqlite_url: str) -> Iterator[tuple[Callable[..., Any], TokenStore]]:
    engine: Engine = make_engine(sqlite_url)
    settings = Settings(
        database_url=sqlite_url,
        connectors=[
            {"type": "agent", "name": "node-a"},  # store tokens only
            {"type": "agent", "name": "node-b", "token": LEGACY},  # the old key, for one release
        ],
    )
    push_callers._warned.clear()
    with TestClient(create_app(settings, engine, clock=lambda: NOW)) as client:

        def post(body: dict[str, Any], secret: str | None) -> Any:
            headers = {"Authorization": f"Bearer {secret}"} if secret else {}
            return client.post("/api/v1/batches", json=body, headers=headers)

        yield post, TokenStore(engine)
    engine.dispose()


def test_push_tokens_push_to_their_connector_only(push: Any) -> None:
    post, store = push
    secret, _ = store.create("node-a-agents", ["push:node-a"])
    r = post(batch("node-a"), secret)
    assert (r.status_code, r.json()["duplicate"]) == (200, False)
    r = post(batch("node-b"), secret)
    assert r.status_code == 403
    assert r.json() == {
        "error": 'token is not valid for agent "node-b"',
        "field": "agent",
        "code": "FORBIDDEN",
    }
    admin, _ = store.create("root", ["admin"])
    assert post(batch("node-a", 2), admin).status_code == 200
    # An admin still can't push to a connector that isn't configured.
    assert post(batch("node-z"), admin).json()["error"] == 'token is not valid for agent "node-z"'


@pytest.mark.parametrize(
    ("scopes", "revoke", "status", "message"),
    [
        (["read"], False, 403, "token has no push:CONNECTOR scope"),
        (["push:node-a"], True, 401, "token revoked"),
    ],
)
def test_store_tokens_that_may_not_push(
    push: Any, scopes: list[str], revoke: bool, status: int, message: str
) -> None:
    post, store = push
    secret, _ = store.create("t", scopes)
    if revoke:
        store.revoke("t")
    r = post(batch("node-a"), secret)
    assert (r.status_code, r.json()["error"]) == (status, message)


def test_legacy_connector_token_still_pushes_and_warns_once(push: Any, audit_lines: Any) -> None:
    post, _ = push
    assert post(batch("node-b", 1), LEGACY).status_code == 200
    assert post(batch("node-b", 2), LEGACY).status_code == 200
    r = post(batch("node-a", 1), LEGACY)  # the old key is its own connector's only
    assert (r.status_code, r.json()["error"]) == (403, 'token is not valid for agent "node-a"')
    text = audit_lines.text()
    assert text.count("deprecated: agent connector token") == 1
    assert '"connector": "node-b"' in text and LEGACY not in text


def test_no_or_unknown_token(push: Any) -> None:
    post, _ = push
    r = post(batch("node-a"), None)
    assert (r.status_code, r.json()["error"]) == (401, "missing bearer token (Authorization: Bearer <token>)")
    r = post(batch("node-a"), "x" * 32)
    assert (r.status_code, r.json()["error"]) == (403, "token is not valid for any agent connector")
