"""The GraphiQL page over HTTP (the browser test is tests/browser/test_graphiql.py): a shell that
needs no token and answers nothing, its files vendored intact and served from the app, and every
way of asking a query still behind the token."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from service.api.graphiql import ASSET_DIR, ASSET_URL, CONTENT_SECURITY_POLICY, is_graphiql_page
from service.app import create_app
from service.auth.tokens import TokenStore
from service.db import make_engine
from service.settings import Settings

HTML = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}  # Chromium's


@pytest.fixture
def client(sqlite_url: str) -> Iterator[TestClient]:
    engine = make_engine(sqlite_url)
    with TestClient(create_app(Settings(database_url=sqlite_url), engine)) as c:
        c.token, _ = TokenStore(engine).create("reader", ["read"])  # type: ignore[attr-defined]
        yield c
    engine.dispose()


def test_the_page_needs_no_token_and_loads_only_its_own_files(client: TestClient) -> None:
    page = client.get("/graphql", headers=HTML)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "connect-src 'self'" in CONTENT_SECURITY_POLICY and "unsafe-eval" not in CONTENT_SECURITY_POLICY
    assert 'id="ledger-token"' in page.text and "Bearer token" in page.text
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert "data:," in sources  # the icon: no /favicon.ico request (it would be a 401)
    files = [s for s in sources if s != "data:,"]
    assert files and all(s.startswith(f"{ASSET_URL}/") for s in files), files
    for path in files:  # each one served without a token
        r = client.get(path)
        assert r.status_code == 200 and r.content == (ASSET_DIR / path.rsplit("/", 1)[1]).read_bytes(), path


def test_vendored_files_match_their_checksums_and_versions() -> None:
    sums = (ASSET_DIR / "SHA256SUMS").read_text().splitlines()
    names = {line.split("  ", 1)[1] for line in sums}
    assert {"react.production.min.js", "react-dom.production.min.js", "graphiql.min.js"} <= names
    assert "graphiql.min.css" in names
    assert {"LICENSE-react", "LICENSE-react-dom", "LICENSE-graphiql"} <= names
    for line in sums:
        digest, name = line.split("  ", 1)
        assert hashlib.sha256((ASSET_DIR / name).read_bytes()).hexdigest() == digest, name
    versions = dict(line.split(" ")[:2] for line in (ASSET_DIR / "VERSIONS").read_text().splitlines())
    assert versions == {"react": "18.3.1", "react-dom": "18.3.1", "graphiql": "3.9.0"}
    assert 'version="18.3.1"' in (ASSET_DIR / "react.production.min.js").read_text()


def test_queries_still_need_the_token(client: TestClient) -> None:
    token = {"Authorization": f"Bearer {client.token}"}  # type: ignore[attr-defined]
    query = {"query": "{ __typename }"}
    # A GET query from a browser is a query, not the page.
    assert client.get("/graphql", params=query, headers=HTML).status_code == 401
    answer = {"data": {"__typename": "Query"}}
    assert client.get("/graphql", params=query, headers={**HTML, **token}).json() == answer
    assert client.post("/graphql", json=query, headers=HTML).status_code == 401
    assert client.post("/graphql", json=query, headers={**HTML, **token}).json() == answer
    # Not a browser: no page, and no query is a 400 that says so (after the token check).
    assert client.get("/graphql", headers={"Accept": "*/*"}).status_code == 401
    r = client.get("/graphql", headers={"Accept": "*/*", **token})
    assert r.status_code == 400 and "No GraphQL query" in r.text


@pytest.mark.parametrize(
    ("method", "query_string", "accept", "page"),
    [
        ("GET", b"", "text/html", True),
        ("GET", b"operationName=x", "text/html", True),
        ("GET", b"query=%7B__typename%7D", "text/html", False),
        ("GET", b"", "*/*", False),
        ("GET", b"", "application/json", False),
        ("POST", b"", "text/html", False),
    ],
)
def test_which_requests_get_the_page(method: str, query_string: bytes, accept: str, page: bool) -> None:
    scope = {
        "type": "http",
        "method": method,
        "path": "/graphql",
        "query_string": query_string,
        "headers": [(b"accept", accept.encode())],
    }
    assert is_graphiql_page(scope) is page


def test_a_path_climbing_out_of_the_folder_reaches_nothing(client: TestClient) -> None:
    # The raw path (no client-side normalisation): StaticFiles refuses to leave its folder, and
    # the request never reaches /graphql.
    app = client.app
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": f"{ASSET_URL}/../../graphql",
        "raw_path": f"{ASSET_URL}/../../graphql".encode(),
        "query_string": b"query=%7B__typename%7D",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
        "root_path": "",
    }
    client.portal.call(app, scope, receive, send)  # type: ignore[union-attr]
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")  # type: ignore[misc]
    assert start["status"] == 404 and b"__typename" not in body and b"Query" not in body
