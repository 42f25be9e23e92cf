"""GraphiQL on ``GET /graphql`` in headless Chromium, offline: the vendored page loads with nothing
leaving 127.0.0.1, its *Bearer token* field carries the token, a query typed into the editor and run
shows the server's own answer, and a wrong token shows the 401. The ``page`` fixture fails a test on
any console error or warning, page error or outside request; the only console lines allowed are
Chromium's own "Failed to load resource … 401" for the refusals a test provokes (see
:func:`expect_refusals`). Screenshot: docs/screenshots/graphiql.png (scripts/screenshots).
"""

from __future__ import annotations

import json
from typing import Any

from browser.conftest import ALLOWED_HOST, WINDOW, LiveServer, check_clean
from browser.dashboard import screenshots_dir
from playwright.sync_api import expect

TOKEN_KEY = "gpu-ledger.token"  # ledger-graphiql.js's sessionStorage key
QUERY = (
    f'{{ usage(window: {{start: "{WINDOW["start"]}", end: "{WINDOW["end"]}"}}, groupBy: [ENVIRONMENT]) '
    "{ environment gpuHours idleGpuHours } }"
)
RESPONSE_EDITOR = ".graphiql-response .CodeMirror"
RESPONSE_TEXT = f"document.querySelector('{RESPONSE_EDITOR}').CodeMirror.getValue()"


def expect_refusals(page: Any, count: int) -> None:
    """Take exactly ``count`` console lines of Chromium's for 401s of /graphql off the guard (the
    refusals the test asked for), leaving anything else for :func:`check_clean`."""
    refused = [c for c in page.guard.console if "status of 401" in c and "/graphql" in c]
    assert len(refused) == count, page.guard.console
    page.guard.console[:] = [c for c in page.guard.console if c not in refused]


def open_graphiql(page: Any, server: LiveServer) -> list[str]:
    """Go to GraphiQL and wait for its editors; returns the list every requested URL goes to."""
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    response = page.goto(f"{server.url}/graphql")
    assert response is not None and response.status == 200
    assert response.headers["content-type"].startswith("text/html")
    page.wait_for_selector(".graphiql-query-editor .CodeMirror")
    return requested


def use_token(page: Any, token: str) -> None:
    page.fill("#ledger-token", token)
    page.press("#ledger-token", "Enter")


def run_query(page: Any, query: str) -> dict[str, Any]:
    """Type ``query`` into the editor, run it, and return the result pane's JSON."""
    page.click(".graphiql-query-editor .CodeMirror")
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(query)
    typed = page.evaluate(
        "document.querySelector('.graphiql-query-editor .CodeMirror').CodeMirror.getValue()"
    )
    assert typed == query
    page.evaluate(f"document.querySelector('{RESPONSE_EDITOR}').CodeMirror.setValue('')")
    page.click(".graphiql-execute-button")
    page.wait_for_function(f"() => {RESPONSE_TEXT}.length > 0")
    result: dict[str, Any] = json.loads(page.evaluate(RESPONSE_TEXT))
    return result


def status_shows(page: Any, text: str) -> None:
    """Wait until the bar's HTTP status line shows ``text`` (the page's CSP forbids eval, so no
    string predicates: Playwright's own locator wait)."""
    expect(page.locator("#ledger-status")).to_contain_text(text)


def status_text(page: Any) -> str:
    text: str = page.inner_text("#ledger-status")
    return text


def test_graphiql_offline_with_the_token_field(page: Any, live_server: LiveServer) -> None:
    requested = open_graphiql(page, live_server)
    # No token yet: the page is there, and GraphiQL's schema request was refused with the reason shown.
    status_shows(page, "401")
    assert "UNAUTHENTICATED" in status_text(page) and "missing bearer token" in status_text(page)
    expect_refusals(page, 1)
    check_clean(page)

    use_token(page, live_server.token)
    # With the token GraphiQL fetches the schema again: the docs explorer knows the Query type.
    status_shows(page, "200 OK")
    result = run_query(page, QUERY)
    assert result == {"data": live_server.gql(QUERY)}
    assert result["data"]["usage"] and all(row["gpuHours"] > 0 for row in result["data"]["usage"])
    assert "200 OK" in status_text(page)
    # The token stays in this tab's sessionStorage (not localStorage) and comes back on reload.
    assert page.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')") == live_server.token
    assert page.evaluate("JSON.stringify(localStorage)").find(live_server.token) == -1
    page.click(".graphiql-un-styled[aria-label='Show Documentation Explorer']")
    page.wait_for_selector(".graphiql-doc-explorer-title")
    page.click("button[aria-label^='Prettify']")
    assert page.evaluate(f"{RESPONSE_TEXT}.length") > 0
    assert page.get_attribute("#ledger-token", "type") == "password"  # the screenshot shows dots
    page.screenshot(path=str(screenshots_dir() / "graphiql.png"))

    page.reload()
    page.wait_for_selector(".graphiql-query-editor .CodeMirror")
    assert page.input_value("#ledger-token") == live_server.token
    status_shows(page, "200 OK")

    # Everything the page asked for came from the server itself: its own files and /graphql.
    base = live_server.url
    assert requested and all(
        u.startswith(f"{base}/static/graphiql/") or u == f"{base}/graphql" for u in requested
    )
    assert all(f"//{ALLOWED_HOST}:" in u for u in requested)
    assert f"{base}/static/graphiql/graphiql.min.js" in requested


def test_a_wrong_token_shows_the_401_and_the_right_one_the_data(page: Any, live_server: LiveServer) -> None:
    page.add_init_script(f"sessionStorage.setItem('{TOKEN_KEY}', 'gpl_{'x' * 43}')")
    open_graphiql(page, live_server)
    assert page.input_value("#ledger-token") == f"gpl_{'x' * 43}"
    result = run_query(page, QUERY)
    assert result["data"] is None
    assert [e["extensions"]["code"] for e in result["errors"]] == ["UNAUTHENTICATED"]
    assert "unknown token" in result["errors"][0]["message"]
    assert "HTTP 401 UNAUTHENTICATED: unknown token" in status_text(page)
    expect_refusals(page, 2)  # the schema request, then the query

    use_token(page, live_server.token)
    status_shows(page, "200 OK")
    result = run_query(page, QUERY)
    assert result == {"data": live_server.gql(QUERY)}
    assert page.evaluate(f"sessionStorage.getItem('{TOKEN_KEY}')") == live_server.token
