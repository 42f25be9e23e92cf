"""The push endpoint under test: a real app on a clock of the test's choosing, and row counts."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, func, select
from starlette.testclient import TestClient

from service.app import create_app
from service.models import ConnectorState, PushedBatch, PushedDevice, PushedSample, PushedWorkload
from service.settings import Settings
from service.timeutil import to_ms

TOKEN = "a" * 32
NOW = dt.datetime(2025, 9, 10, 6, tzinfo=dt.UTC)  # the endpoint's clock
NOW_MS = to_ms(NOW)
TABLES = (PushedBatch, PushedSample, PushedDevice, PushedWorkload, ConnectorState)


@contextmanager
def push_client(engine: Engine, now: dt.datetime = NOW, **agent: Any) -> Iterator[TestClient]:
    """The whole app (middleware included) with one agent connector ``node-a`` (``agent``: its
    other keys, e.g. ``backfill_days``), its push endpoint on the clock ``now``."""
    settings = Settings(
        database_url=str(engine.url),
        connectors=[{"type": "agent", "name": "node-a", "token": TOKEN, **agent}],
    )

    async def no_graphql(scope: Any, receive: Any, send: Any) -> None:  # not under test here
        raise AssertionError("graphql not expected")

    with TestClient(create_app(settings, engine, graphql_app=no_graphql, clock=lambda: now)) as client:
        yield client


def batch(seq: int = 1, n: int = 3, start_ms: int = NOW_MS - 3_600_000) -> dict[str, Any]:
    """A good batch of ``n`` readings 5 s apart from ``start_ms`` (an hour before ``NOW``)."""
    return {
        "batch_id": f"host1:{seq}",
        "agent": "node-a",
        "devices": [
            {"device_id": "GPU-1", "environment": "onprem", "gpu_model": "NVIDIA H200", "tdp_w": 700.0}
        ],
        "workloads": [{"workload_key": "k8s:ns/p/c", "team": "research"}],
        "samples": {
            "device_id": ["GPU-1"] * n,
            "ts_ms": [start_ms + k * 5000 for k in range(n)],
            "metric": ["gpu_util"] * n,
            "value": [float(10 * k) for k in range(n)],
            "workload_key": ["k8s:ns/p/c"] * n,
            "share": [1.0] * n,
        },
    }


def post(client: TestClient, body: Any, token: str = TOKEN) -> Any:
    """POST ``body``: bytes as they are, anything else as JSON (``NaN`` literals allowed)."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    return client.post("/api/v1/batches", content=content, headers=headers)


def counts(engine: Engine) -> dict[str, int]:
    """Rows per staging table (and connector_state): what a refused push must leave alone."""
    with engine.connect() as conn:
        return {
            m.__tablename__: conn.execute(select(func.count()).select_from(m.__table__)).scalar_one()  # type: ignore[attr-defined]
            for m in TABLES
        }
