"""The auth middleware in the real app: who gets through, the 401/403 bodies, the audit lines."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from oidc_fake import Issuer, Key, oidc_settings
from sqlalchemy import Engine
from starlette.testclient import TestClient

from service.app import create_app
from service.auth.tokens import TokenStore
from service.db import make_engine
from service.settings import Settings

TYPENAME = {"query": "{ __typename }"}
Audits = Callable[[], list[dict[str, Any]]]


def app_client(engine: Engine, **auth: Any) -> TestClient:
    return TestClient(create_app(Settings(database_url=str(engine.url), auth=auth), engine))


@pytest.fixture
def client(sqlite_url: str) -> Iterator[TestClient]:
    engine = make_engine(sqlite_url)
    with app_client(engine) as c:
        c.store = TokenStore(engine)  # type: ignore[attr-defined]
        yield c
    engine.dispose()


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_anonymous_graphql_is_401_graphql_shaped(client: TestClient) -> None:
    r = client.post("/graphql", json=TYPENAME)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == 'Bearer realm="gpu-ledger"'
    assert r.json() == {
        "data": None,
        "errors": [
            {
                "message": "missing bearer token: send Authorization: Bearer <token>",
                "extensions": {"code": "UNAUTHENTICATED"},
            }
        ],
    }


def test_health_and_readiness_stay_open(client: TestClient) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200


def test_read_token_reads_graphql_and_graphiql(client: TestClient) -> None:
    secret, _ = client.store.create("bi", ["read:project:atlas"])  # type: ignore[attr-defined]
    r = client.post("/graphql", json=TYPENAME, headers=bearer(secret))
    assert (r.status_code, r.json()) == (200, {"data": {"__typename": "Query"}})
    page = client.get("/graphql", headers={"Accept": "text/html", **bearer(secret)})
    assert page.status_code == 200 and "graphiql" in page.text.lower()
    # The GraphiQL page is a shell without data (open); a query from a browser still needs the token.
    assert client.get("/graphql", headers={"Accept": "text/html"}).status_code == 200
    html = {"Accept": "text/html"}
    assert client.get("/graphql", params={"query": "{ __typename }"}, headers=html).status_code == 401


def test_scopes_per_path(client: TestClient) -> None:
    store: TokenStore = client.store  # type: ignore[attr-defined]
    reader, _ = store.create("bi", ["read"])
    scraper, _ = store.create("prom", ["metrics"])
    pusher, _ = store.create("agents", ["push:node-a"])
    r = client.get("/metrics", headers=bearer(reader))
    assert r.status_code == 403
    assert r.headers["www-authenticate"] == 'Bearer realm="gpu-ledger", error="insufficient_scope"'
    assert r.json() == {"error": "this needs the metrics scope", "code": "FORBIDDEN"}
    assert client.get("/metrics", headers=bearer(scraper)).status_code == 200
    r = client.post("/graphql", json=TYPENAME, headers=bearer(scraper))
    assert r.status_code == 403
    assert r.json()["errors"][0] == {
        "message": "this needs a read scope (read, read:project:NAME or read:team:NAME)",
        "extensions": {"code": "FORBIDDEN"},
    }
    assert client.post("/graphql", json=TYPENAME, headers=bearer(pusher)).status_code == 403
    # Unknown paths need a caller too, then 404.
    assert client.get("/nope").status_code == 401
    assert client.get("/nope", headers=bearer(reader)).status_code == 404


def test_anonymous_read_mode(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    with app_client(engine, anonymous_read=True) as c:
        assert c.post("/graphql", json=TYPENAME).json() == {"data": {"__typename": "Query"}}
        assert c.get("/metrics").status_code == 200
        # A credential that is present but wrong is refused even so.
        r = c.post("/graphql", json=TYPENAME, headers=bearer("gpl_wrong"))
        assert r.status_code == 401 and r.json()["errors"][0]["message"] == "unknown token"
        assert r.headers["www-authenticate"] == 'Bearer realm="gpu-ledger", error="invalid_token"'
        # Anonymous never pushes.
        assert c.post("/api/v1/batches", json={}).status_code == 401
    engine.dispose()


def test_audit_lines(client: TestClient, audit_lines: Audits) -> None:
    store: TokenStore = client.store  # type: ignore[attr-defined]
    admin, _ = store.create("root", ["admin"])
    reader, _ = store.create("bi", ["read"])
    client.post("/graphql", json=TYPENAME, headers=bearer(admin))
    client.post("/graphql", json=TYPENAME, headers=bearer(reader))  # not audited: an ordinary read
    client.get("/metrics", headers=bearer(reader))
    client.post("/graphql", json=TYPENAME, headers=bearer("gpl_nobody"))
    store.revoke("bi")
    client.post("/graphql", json=TYPENAME, headers=bearer(reader))
    got = [
        {k: e.get(k) for k in ("action", "outcome", "caller", "caller_kind", "scopes", "path", "reason")}
        for e in audit_lines()
    ]
    assert got == [
        {"action": "admin.call", "outcome": "ok", "caller": "root", "caller_kind": "token",
         "scopes": "admin", "path": "/graphql", "reason": None},
        {"action": "refused", "outcome": "FORBIDDEN", "caller": "bi", "caller_kind": None, "scopes": None,
         "path": "/metrics", "reason": "this needs the metrics scope"},
        {"action": "refused", "outcome": "UNAUTHENTICATED", "caller": None, "caller_kind": None,
         "scopes": None, "path": "/graphql", "reason": "unknown token"},
        {"action": "refused", "outcome": "UNAUTHENTICATED", "caller": "bi", "caller_kind": None,
         "scopes": None, "path": "/graphql", "reason": "token revoked"},
    ]  # fmt: skip
    assert all(e["client"] == "testclient:50000" for e in audit_lines())
    text = audit_lines.text()  # type: ignore[attr-defined]
    assert admin not in text and reader not in text and admin[4:] not in text


def test_token_table_unreadable_is_503(tmp_path: Any) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'never-migrated.db'}")
    with app_client(engine) as c:
        r = c.post("/graphql", json=TYPENAME, headers=bearer("gpl_x"))
    engine.dispose()
    assert (r.status_code, r.headers["retry-after"]) == (503, "5")
    assert r.json()["errors"][0] == {
        "message": "cannot check tokens now: database unavailable",
        "extensions": {"code": "AUTH_UNAVAILABLE"},
    }
    assert "Traceback" not in r.text


def test_oidc_jwts_through_the_app(sqlite_url: str, issuer: Issuer, rsa_a: Key) -> None:
    engine = make_engine(sqlite_url)
    auth = oidc_settings(issuer).model_dump()
    with app_client(engine, **auth) as c:
        ok = c.post("/graphql", json=TYPENAME, headers=bearer(issuer.token(rsa_a, groups=("team-ml",))))
        nobody = c.post("/graphql", json=TYPENAME, headers=bearer(issuer.token(rsa_a, groups=("x",))))
        expired = c.post("/graphql", json=TYPENAME, headers=bearer(issuer.token(rsa_a, minutes=-10)))
        issuer.failing, issuer.published = True, []
        rotated = c.post(
            "/graphql", json=TYPENAME, headers=bearer(issuer.token(rsa_a, headers={"kid": "new-kid"}))
        )
    engine.dispose()
    assert (ok.status_code, ok.json()) == (200, {"data": {"__typename": "Query"}})
    assert nobody.status_code == 403
    assert nobody.json()["errors"][0]["message"] == "JWT claim 'groups' maps to no scope of this service"
    assert expired.status_code == 401 and expired.json()["errors"][0]["message"] == "JWT expired"
    # The issuer is down and the kid is unknown: the cached keys don't have it, so 401, not 503.
    assert rotated.status_code == 401
    assert rotated.json()["errors"][0]["message"] == "JWT signed by an unknown key (kid)"


def test_jwt_without_oidc_configured(client: TestClient, issuer: Issuer, rsa_a: Key) -> None:
    r = client.post("/graphql", json=TYPENAME, headers=bearer(issuer.token(rsa_a)))
    assert r.status_code == 401
    assert r.json()["errors"][0]["message"] == "JWT not accepted: no OIDC issuer is configured"
