"""Fixtures of the API tests: the real app served by uvicorn on a free port, queried over HTTP."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from ledger_rows import put  # noqa: F401  (fixture)
from sqlalchemy import Engine

from service.app import create_app
from service.settings import Settings

Gql = Callable[..., dict[str, Any]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(engine: Engine, **settings: Any) -> Iterator[str]:
    """``create_app`` on ``engine`` under uvicorn in a thread; yields the base URL.

    Callers without a token read everything (``[auth] anonymous_read``) unless ``auth`` is given:
    these tests are about answers; tests/api/test_scope_leak.py and tests/auth are about callers.
    """
    settings.setdefault("auth", {"anonymous_read": True})
    app = create_app(Settings(database_url=str(engine.url), **settings), engine)
    port = _free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", ws="none", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def client(base: str) -> Gql:
    def gql(query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        r = httpx.post(f"{base}/graphql", json={"query": query, "variables": variables or {}}, timeout=30)
        assert r.headers["content-type"].startswith("application/json"), r.text
        assert "Traceback" not in r.text
        body: dict[str, Any] = r.json()
        return body

    return gql


@pytest.fixture
def gql(engine: Engine) -> Iterator[Gql]:
    """POST a query to the running app: ``gql(query, variables) -> response JSON``."""
    for base in serve(engine, page_size_max=60):
        yield client(base)
