"""``gpu-ledger serve``'s authentication rules, on real ``serve`` processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.auth.config import AuthSettings
from service.auth.serve_rules import ServeRefused, is_loopback, serve_auth
from service.auth.tokens import TokenStore
from service.db import make_engine

EXE = Path(sys.executable).parent / "gpu-ledger"
QUERY = {"query": "{ __typename }"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(url: str) -> dict[str, str]:
    return {**os.environ, "GPU_LEDGER_DATABASE_URL": url, "GPU_LEDGER_CONFIG": ""}


@pytest.fixture
def served(sqlite_url: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``gpu-ledger serve`` (not --demo) on 127.0.0.1 and a read token made by the CLI."""
    engine = make_engine(sqlite_url)  # the CLI's create is tested in test_auth_cli.py
    secret, _ = TokenStore(engine).create("bi", ["read"])
    engine.dispose()
    port, log = _free_port(), (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [str(EXE), "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=_env(sqlite_url), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-2000:]
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield base, secret
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()


@pytest.mark.e2e
def test_anonymous_graphql_to_serve_is_401(served: tuple[str, str]) -> None:
    base, secret = served
    r = httpx.post(f"{base}/graphql", json=QUERY)
    assert r.status_code == 401 and r.headers["www-authenticate"] == 'Bearer realm="gpu-ledger"'
    assert r.json()["errors"][0]["extensions"] == {"code": "UNAUTHENTICATED"}
    assert httpx.get(f"{base}/metrics").status_code == 401
    r = httpx.post(f"{base}/graphql", json=QUERY, headers={"Authorization": f"Bearer {secret}"})
    assert (r.status_code, r.json()) == (200, {"data": {"__typename": "Query"}})


@pytest.mark.e2e
def test_serve_on_a_public_address_without_authentication_refuses_to_start(sqlite_url: str) -> None:
    r = subprocess.run(
        [str(EXE), "serve", "--host", "0.0.0.0", "--port", str(_free_port())],
        env=_env(sqlite_url), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    errors = [line for line in r.stderr.splitlines() if line.startswith("gpu-ledger: error:")]
    assert r.returncode == 2 and errors == [
        "gpu-ledger: error: refusing to serve on 0.0.0.0, a non-loopback address, with no authentication "
        "configured: create a token (gpu-ledger tokens create --name NAME --scope read), configure OIDC "
        "([auth] oidc_issuer, oidc_audience, oidc_jwks_url), or allow anonymous reads "
        "([auth] anonymous_read = true)"
    ]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("ledger.internal", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


OIDC = {"oidc_issuer": "https://idp", "oidc_audience": "a", "oidc_jwks_url": "https://idp/jwks"}


@pytest.mark.parametrize(
    ("host", "demo", "tokens", "auth", "anonymous"),
    [
        ("127.0.0.1", True, 0, {}, True),  # the two-command demo
        ("::1", True, 3, {}, True),
        ("127.0.0.1", False, 0, {}, False),  # plain serve on loopback: everything 401 until a token
        ("0.0.0.0", True, 1, {}, False),  # --demo off loopback is never anonymous
        ("0.0.0.0", False, 1, {}, False),
        ("0.0.0.0", False, 0, OIDC, False),
        ("0.0.0.0", False, 0, {"anonymous_read": True}, True),  # the operator said so
    ],
)
def test_serve_auth(host: str, demo: bool, tokens: int, auth: dict[str, Any], anonymous: bool) -> None:
    assert serve_auth(AuthSettings(**auth), host, demo=demo, active_tokens=tokens).anonymous_read is anonymous


@pytest.mark.parametrize("demo", [True, False])
def test_serve_auth_refuses_public_address_without_authentication(demo: bool) -> None:
    with pytest.raises(ServeRefused, match="refusing to serve on 10.0.0.5, a non-loopback address"):
        serve_auth(AuthSettings(), "10.0.0.5", demo=demo, active_tokens=0)


def test_demo_on_loopback_says_so_in_its_log(audit_lines: Any) -> None:
    serve_auth(AuthSettings(), "127.0.0.1", demo=True, active_tokens=0)
    (line,) = [json.loads(x) for x in audit_lines.text().splitlines()]
    assert {k: line[k] for k in ("level", "event", "reason", "host", "scopes")} == {
        "level": "warning",
        "event": "anonymous read enabled",
        "reason": "serve --demo on a loopback address",
        "host": "127.0.0.1",
        "scopes": "read metrics",
    }
