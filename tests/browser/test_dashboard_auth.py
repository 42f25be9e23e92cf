"""Who gets what from the dashboard: its page and files are public (code, no data) while every
number stays behind the token; hostile addresses never get a 500, a file outside the static folders
or their own text reflected; and in the browser, the sign-in flow: no token, a wrong one, the right
one, and ``serve --demo``'s anonymous read on loopback."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import uvicorn
from browser.conftest import ALLOWED_HOST, LiveServer, _free_port
from browser.dashboard import DAYS, TOKEN_KEY, sign_in, wait_for

from service.app import create_app
from service.web import dashboard

STATIC = Path(dashboard.__file__).parent / "static"
BASE = f"start={DAYS['start']}&end={DAYS['end']}"
DATA_PATHS = [
    ("POST", "/graphql", {"query": "{ connectors { name } }"}),
    ("GET", "/graphql?query=%7Bconnectors%7Bname%7D%7D", None),
    ("GET", "/export/cost.csv?start=2025-08-28T00:00:00Z&end=2025-09-04T00:00:00Z", None),
    ("GET", "/metrics", None),
]


def raw_get(base: str, path: str) -> tuple[int, bytes]:
    """GET ``path`` exactly as written (no client-side normalization of ``..`` or escapes)."""
    host = urlsplit(base)
    conn = http.client.HTTPConnection(host.hostname, host.port, timeout=30)
    try:
        conn.putrequest("GET", path, skip_accept_encoding=True)
        conn.endheaders()
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def test_the_shell_is_public_and_holds_no_data(live_server: LiveServer) -> None:
    page = httpx.get(f"{live_server.url}/", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "default-src 'none'" in page.headers["content-security-policy"]
    template = (Path(dashboard.__file__).parent / "index.html").read_text()
    assert page.text == template.replace(dashboard.ANONYMOUS_MARK, "false")  # a fixed file: no data
    for path in ("dashboard/main.js", "dashboard/pages/overview.js", "vendor/uplot/uPlot.iife.min.js"):
        asset = httpx.get(f"{live_server.url}/static/{path}", timeout=30)
        assert asset.status_code == 200 and asset.content == (STATIC / path).read_bytes(), path


def test_every_data_path_needs_the_token(live_server: LiveServer) -> None:
    for method, path, body in DATA_PATHS:
        for headers in ({}, {"Authorization": "Bearer gpl_not-a-real-token"}):
            r = httpx.request(method, f"{live_server.url}{path}", json=body, headers=headers, timeout=30)
            assert r.status_code == 401, (method, path, headers, r.text)
            assert "demo" not in r.text and "Traceback" not in r.text
    answer = httpx.post(f"{live_server.url}/graphql", json=DATA_PATHS[0][2], headers=live_server.headers)
    assert answer.json() == {"data": {"connectors": [{"name": "aws-bills"}, {"name": "demo"}]}}


@pytest.mark.parametrize(
    "path",
    [
        "/static/dashboard-private/x",  # only the folders themselves are public
        "/static/dashboardx",
        "/static/vendorx/uplot/LICENSE",
        "/staticx/dashboard/main.js",
        "//static/dashboard/main.js",
    ],
)
def test_near_misses_of_the_public_prefixes_need_the_token(live_server: LiveServer, path: str) -> None:
    status, body = raw_get(live_server.url, path)
    assert status == 401, (path, body)


HOSTILE = [
    "/static/dashboard/../../dashboard.py",
    "/static/dashboard/..%2f..%2fdashboard.py",
    "/static/dashboard/%2e%2e/%2e%2e/dashboard.py",
    "/static/vendor/../dashboard/../../__init__.py",
    "/static/vendor/uplot/..%5c..%5c..%5cdashboard.py",
    "/static/dashboard/%00",
    "/static/dashboard/main.js%00.py",
    "/static/dashboard/",
    "/static/vendor/",
    "/static/dashboard/" + "a" * 5000,
    "/static/dashboard/%ff%fe",
    "/static/dashboard/main.js?%ff=%zz&x=" + "%" * 300,
    "/?page=%3Cscript%3Ealert(1)%3C/script%3E&start=%ff&end=" + "9" * 3000,
    "/?%00=%00&page[]=1&&&==",
    "/?tz=../../etc/passwd&top=-1e309&after=%%%",
]


@pytest.mark.parametrize("path", HOSTILE)
def test_hostile_addresses(live_server: LiveServer, path: str) -> None:
    status, body = raw_get(live_server.url, path)
    assert status in (200, 400, 401, 404, 405), (path, status)
    assert b"Traceback" not in body and b"from __future__" not in body  # no Python source
    if status == 200:  # the page or the file asked for, the same bytes whatever the query string says
        clean = path.split("?", 1)[0]
        expected = httpx.get(f"{live_server.url}{clean}", timeout=30).content
        assert body == expected, path
        if clean != "/":
            assert body == (STATIC / clean.removeprefix("/static/")).read_bytes(), path


# --- in the browser -------------------------------------------------------------------------------


def graphql_requests(page: Any) -> list[str]:
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url) if "/graphql" in r.url else None)
    return seen


def take_refusals(page: Any, count: int) -> None:
    """Takes Chromium's own console lines for the 401s the test provoked off the guard."""
    refused = [c for c in page.guard.console if "status of 401" in c]
    assert len(refused) == count, page.guard.console
    for line in refused:
        page.guard.console.remove(line)


def test_sign_in_with_a_token(page: Any, live_server: LiveServer) -> None:
    asked = graphql_requests(page)
    page.goto(f"{live_server.url}/?page=overview&{BASE}")
    wait_for(page, "needs-token")
    assert page.is_visible("#token-form") and asked == []  # nothing asked without a token
    # A wrong token: the service's refusal is shown, and nothing else.
    page.fill("#token-input", "gpl_wrong")
    page.click('#token-form button[type="submit"]')
    wait_for(page, "error")
    assert "refused" in page.inner_text("#banner") and page.is_visible("#token-form")
    take_refusals(page, 1)
    # The right one: numbers, and the token stays in this tab only.
    page.fill("#token-input", live_server.token)
    page.click('#token-form button[type="submit"]')
    wait_for(page)
    assert page.is_hidden("#token-form") and page.is_hidden("#banner")
    assert page.inner_text('[data-kpi="cost"] strong').startswith("$")
    assert page.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')") == live_server.token
    assert page.evaluate(f"localStorage.getItem('{TOKEN_KEY}')") is None
    assert page.context.cookies() == []
    page.click("#token-toggle")
    page.click("#token-forget")
    wait_for(page, "needs-token")
    assert page.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')") is None


def test_hostile_url_state_falls_back_to_defaults(page: Any, live_server: LiveServer) -> None:
    sign_in(page, live_server)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(
        f"{live_server.url}/?page=%3Cimg%20src=x%20onerror=alert(1)%3E&start=junk&end=2025-13-45"
        "&environment=%3Cscript%3Ealert(2)%3C/script%3E&top=-7&trend=%22"
    )
    wait_for(page)
    assert page.url.split("?", 1)[1].startswith("page=overview&start=")
    assert page.input_value('select[name="environment"]') == "<script>alert(2)</script>"  # as text
    assert page.locator('[data-table="environments"] tbody tr').count() == 0
    page.goto(f"{live_server.url}/?page=devices&{BASE}&after=%25%25%25&q=%27%22%3Csvg%20onload=alert(3)%3E")
    wait_for(page, "error")
    assert "cursor" in page.inner_text("#banner")  # the API's INVALID_ARGUMENT, shown as text
    page.goto(f"{live_server.url}/?page=utilization&{BASE}&tz=%3Cb%3Ebold%3C/b%3E")
    wait_for(page)
    assert page.locator("#content b").count() == 0
    assert dialogs == []


@pytest.fixture
def anonymous_server(live_server: LiveServer) -> Iterator[str]:
    """The same database served as ``serve --demo`` on loopback serves it: anonymous read on."""
    settings = live_server.settings.model_copy(
        update={"auth": live_server.settings.auth.with_anonymous_read()}
    )
    app = create_app(settings, live_server.engine)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host=ALLOWED_HOST, port=port, log_level="warning", ws="none"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://{ALLOWED_HOST}:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_demo_on_loopback_needs_no_token(page: Any, anonymous_server: str) -> None:
    page.goto(f"{anonymous_server}/?page=connectors")
    wait_for(page)
    assert page.get_attribute("html", "data-anonymous-read") == "true"
    assert page.is_hidden("#token-form")
    assert page.locator('[data-table="connectors"] tbody tr').count() == 2


def test_a_project_token_sees_its_project_only(page: Any, live_server: LiveServer) -> None:
    from service.auth.tokens import TokenStore

    secret, _ = TokenStore(live_server.engine).create("browser-vision", ["read:project:vision"])
    page.add_init_script(
        f"if (location.origin === '{live_server.url}') sessionStorage.setItem('{TOKEN_KEY}', '{secret}')"
    )
    page.goto(f"{live_server.url}/?page=overview&{BASE}")
    wait_for(page)
    assert page.eval_on_selector_all('[data-table="idle"] tbody tr', "rs => rs.map(r => r.dataset.key)") == [
        "vision"
    ]
    options = page.eval_on_selector_all('select[name="project"] option', "os => os.map(o => o.value)")
    assert options == ["", "vision"]
    page.goto(f"{live_server.url}/?page=reconciliation&{BASE}")
    wait_for(page, "error")
    assert "may not read this page" in page.inner_text("#banner")
    assert page.locator('[data-table="reconciliation"]').count() == 0
