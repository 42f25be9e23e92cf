"""Hostile and careless credentials against a real ``serve`` app (uvicorn on 127.0.0.1, a real
JWKS endpoint): each gets its exact status, ``code`` and message, never a 5xx or a traceback, and
a refused credential reads nothing."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import uvicorn
from cryptography.hazmat.primitives import serialization
from oidc_fake import Issuer, Key, ec_key, oidc_settings, rsa_key, serve_issuer

from service.app import create_app
from service.auth.tokens import TokenStore
from service.db import make_engine
from service.settings import Settings

QUERY = {"query": "{ __typename }"}


@dataclass
class World:
    base: str
    tokens: dict[str, str]  # name → secret
    issuer: Issuer
    key: Key
    stranger: Key


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def world(_sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    path = tmp_path_factory.mktemp("auth-corpus") / "ledger.db"
    shutil.copyfile(_sqlite_template, path)
    engine = make_engine(f"sqlite:///{path}")
    past = dt.datetime.now(dt.UTC) - dt.timedelta(days=3)
    tokens = {
        name: TokenStore(engine).create(name, scopes)[0]
        for name, scopes in [("reader", ["read"]), ("revoked", ["read"]), ("scraper", ["metrics"]),
                             ("pusher", ["push:node-a"])]
    }  # fmt: skip
    tokens["expired"] = TokenStore(engine, clock=lambda: past).create("expired", ["read"], expires_days=1)[0]
    TokenStore(engine).revoke("revoked")
    key, stranger = rsa_key("corpus-rsa"), ec_key("stranger")
    with serve_issuer(key) as issuer:
        settings = Settings(database_url=str(engine.url), auth=oidc_settings(issuer).model_dump())
        port = _free_port()
        server = uvicorn.Server(
            uvicorn.Config(create_app(settings, engine), host="127.0.0.1", port=port, log_level="warning",
                           ws="none", lifespan="on")
        )  # fmt: skip
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.01)
        try:
            yield World(f"http://127.0.0.1:{port}", tokens, issuer, key, stranger)
        finally:
            server.should_exit = True
            thread.join(10)
            engine.dispose()


def _b64(data: Any) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _claims(w: World, **extra: Any) -> dict[str, Any]:
    return jwt.decode(w.issuer.token(w.key), options={"verify_signature": False}) | extra


def alg_none(w: World) -> str:
    return f"Bearer {_b64({'alg': 'none', 'kid': w.key.kid})}.{_b64(_claims(w))}."


def hs256_with_public_key(w: World) -> str:
    pem = w.key.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    signing_input = f"{_b64({'alg': 'HS256', 'kid': w.key.kid})}.{_b64(_claims(w))}"
    return f"Bearer {signing_input}.{_b64(hmac.new(pem, signing_input.encode(), hashlib.sha256).digest())}"


def tampered(w: World) -> str:
    header, _, signature = w.issuer.token(w.key, groups=("ops",)).split(".")
    return f"Bearer {header}.{_b64(_claims(w, groups=['finops']))}.{signature}"


Header = Callable[[World], str | None]

# (id, path, Authorization header, status, code, message fragment)
CASES: list[tuple[str, str, Header, int, str, str]] = [
    ("no-header", "/graphql", lambda w: None, 401, "UNAUTHENTICATED",
     "missing bearer token: send Authorization: Bearer <token>"),
    ("basic-scheme", "/graphql", lambda w: "Basic YWRtaW46YWRtaW4=", 401, "UNAUTHENTICATED",
     "unsupported authorization scheme 'Basic': use Bearer <token>"),
    ("empty-bearer", "/graphql", lambda w: "Bearer", 401, "UNAUTHENTICATED", "empty bearer token"),
    ("bare-token-no-scheme", "/graphql", lambda w: w.tokens["reader"], 401, "UNAUTHENTICATED",
     "unsupported authorization scheme 'gpl_"),
    ("garbage", "/graphql", lambda w: "Bearer ' OR 1=1 --", 401, "UNAUTHENTICATED", "invalid bearer token"),
    ("unknown-store-token", "/graphql", lambda w: "Bearer gpl_" + "A" * 43, 401, "UNAUTHENTICATED",
     "unknown token"),
    ("token-with-a-flipped-char", "/graphql", lambda w: "Bearer " + w.tokens["reader"][:-1]
     + ("B" if w.tokens["reader"][-1] != "B" else "C"), 401, "UNAUTHENTICATED", "unknown token"),
    ("revoked", "/graphql", lambda w: "Bearer " + w.tokens["revoked"], 401, "UNAUTHENTICATED",
     "token revoked"),
    ("expired", "/graphql", lambda w: "Bearer " + w.tokens["expired"], 401, "UNAUTHENTICATED",
     "token expired"),
    ("metrics-token-on-graphql", "/graphql", lambda w: "Bearer " + w.tokens["scraper"], 403, "FORBIDDEN",
     "this needs a read scope (read, read:project:NAME or read:team:NAME)"),
    ("push-token-on-graphql", "/graphql", lambda w: "Bearer " + w.tokens["pusher"], 403, "FORBIDDEN",
     "this needs a read scope"),
    ("read-token-on-metrics", "/metrics", lambda w: "Bearer " + w.tokens["reader"], 403, "FORBIDDEN",
     "this needs the metrics scope"),
    ("no-header-on-a-browser-get-query", "/graphql?GET", lambda w: None, 401, "UNAUTHENTICATED",
     "missing bearer token"),
    ("10-kB-header", "/graphql", lambda w: "Bearer " + "x" * 10_240, 401, "UNAUTHENTICATED",
     "Authorization header longer than 8192 bytes"),
    ("jwt-alg-none", "/graphql", alg_none, 401, "UNAUTHENTICATED",
     "JWT algorithm 'none' not allowed (allowed: RS256, ES256)"),
    ("jwt-hs256-signed-with-the-public-key", "/graphql", hs256_with_public_key, 401, "UNAUTHENTICATED",
     "JWT algorithm 'HS256' not allowed"),
    ("jwt-tampered-payload", "/graphql", tampered, 401, "UNAUTHENTICATED", "JWT signature invalid"),
    ("jwt-wrong-audience", "/graphql", lambda w: "Bearer " + w.issuer.token(w.key, aud="other-app"), 401,
     "UNAUTHENTICATED", "JWT audience not accepted"),
    ("jwt-wrong-issuer", "/graphql", lambda w: "Bearer " + w.issuer.token(w.key, iss="https://evil"), 401,
     "UNAUTHENTICATED", "JWT issuer not accepted"),
    ("jwt-expired", "/graphql", lambda w: "Bearer " + w.issuer.token(w.key, minutes=-5), 401,
     "UNAUTHENTICATED", "JWT expired"),
    ("jwt-unknown-kid", "/graphql", lambda w: "Bearer " + w.issuer.token(w.stranger), 401, "UNAUTHENTICATED",
     "JWT signed by an unknown key (kid)"),
    ("jwt-malformed", "/graphql", lambda w: "Bearer a.b.c", 401, "UNAUTHENTICATED", "malformed JWT"),
    ("jwt-groups-map-to-nothing", "/graphql", lambda w: "Bearer " + w.issuer.token(w.key, groups=("guests",)),
     403, "FORBIDDEN", "JWT claim 'groups' maps to no scope of this service"),
    ("jwt-groups-not-a-list", "/graphql", lambda w: "Bearer " + w.issuer.token(w.key, groups={"finops": 1}),
     403, "FORBIDDEN", "maps to no scope"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "header", "status", "code", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_refused(world: World, path: str, header: Header, status: int, code: str, message: str) -> None:
    value = header(world)
    headers = {"Authorization": value} if value is not None else {}
    if path == "/graphql?GET":
        # A GET query from a browser (the GraphiQL page itself is open: service.api.graphiql).
        params, html = {"query": "{ __typename }"}, {"Accept": "text/html", **headers}
        r = httpx.get(f"{world.base}/graphql", params=params, headers=html, timeout=10)
    elif path == "/graphql":
        r = httpx.post(f"{world.base}/graphql", json=QUERY, headers=headers, timeout=10)
    else:
        r = httpx.get(f"{world.base}{path}", headers=headers, timeout=10)
    assert r.status_code == status, r.text
    body = r.json()
    if path.startswith("/graphql"):
        assert body["data"] is None and len(body["errors"]) == 1
        got_code, got_message = body["errors"][0]["extensions"]["code"], body["errors"][0]["message"]
    else:
        got_code, got_message = body["code"], body["error"]
    assert got_code == code and message in got_message, body
    challenge = r.headers.get("www-authenticate", "")
    assert challenge.startswith('Bearer realm="gpu-ledger"')
    assert ("insufficient_scope" in challenge) is (status == 403)
    assert "Traceback" not in r.text and "__typename" not in r.text


def test_the_same_header_with_a_good_token_reads(world: World) -> None:
    """The corpus's refusals are about the credential: the reader's token gets its answer."""
    for value in ("Bearer " + world.tokens["reader"], "bearer   " + world.tokens["reader"],
                  "Bearer " + world.issuer.token(world.key, groups=("finops",))):  # fmt: skip
        r = httpx.post(f"{world.base}/graphql", json=QUERY, headers={"Authorization": value}, timeout=10)
        assert (r.status_code, r.json()) == (200, {"data": {"__typename": "Query"}})
