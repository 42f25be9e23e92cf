"""A fake OIDC issuer: keys made with ``cryptography`` in the test, a real JWKS endpoint on
127.0.0.1 (``http.server`` in a thread), and JWTs signed with those keys."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from service.auth.config import AuthSettings

ISSUER = "https://idp.test.example"
AUDIENCE = "gpu-ledger"
GROUP_SCOPES = {"finops": ["read"], "team-ml": ["read:team:ml"], "ops": ["metrics"]}


@dataclass
class Key:
    kid: str
    alg: str
    private: Any

    @property
    def public_jwk(self) -> dict[str, Any]:
        algo = RSAAlgorithm if self.alg.startswith(("RS", "PS")) else ECAlgorithm
        jwk: dict[str, Any] = algo.to_jwk(self.private.public_key(), as_dict=True)
        return {**jwk, "kid": self.kid, "use": "sig", "alg": self.alg}


def rsa_key(kid: str) -> Key:
    return Key(kid, "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))


def ec_key(kid: str) -> Key:
    return Key(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))


@dataclass
class Issuer:
    """The keys the JWKS endpoint publishes (``published``) and how often it was fetched."""

    url: str = ""
    published: list[Key] = field(default_factory=list)
    fetches: int = 0
    failing: bool = False

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/jwks"

    def token(
        self,
        key: Key,
        *,
        groups: Any = ("finops",),
        minutes: float = 10,
        headers: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        now = dt.datetime.now(dt.UTC)
        body = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": "alice@example.com",
            "iat": now,
            "exp": now + dt.timedelta(minutes=minutes),
            "groups": list(groups) if isinstance(groups, tuple) else groups,
            **claims,
        }
        return jwt.encode(body, key.private, algorithm=key.alg, headers={"kid": key.kid, **(headers or {})})


@contextmanager
def serve_issuer(*keys: Key) -> Iterator[Issuer]:
    issuer = Issuer(published=list(keys))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            issuer.fetches += 1
            if self.path != "/jwks" or issuer.failing:
                self.send_response(503 if issuer.failing else 404)
                self.end_headers()
                return
            body = json.dumps({"keys": [k.public_jwk for k in issuer.published]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    issuer.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield issuer
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def oidc_settings(issuer: Issuer, **overrides: Any) -> AuthSettings:
    values: dict[str, Any] = {
        "oidc_issuer": ISSUER,
        "oidc_audience": AUDIENCE,
        "oidc_jwks_url": issuer.jwks_url,
        "oidc_group_scopes": GROUP_SCOPES,
        "oidc_jwks_min_refresh_s": 0,
        "oidc_jwks_timeout_s": 2,
    }
    return AuthSettings(**{**values, **overrides})
