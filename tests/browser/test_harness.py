"""The browser fixtures themselves: the guard records what must fail a test, and lets the local
server through."""

from __future__ import annotations

from typing import Any

import pytest
from browser.conftest import ALLOWED_HOST, LiveServer, check_clean


def test_local_requests_pass_and_others_are_blocked_and_recorded(page: Any, live_server: LiveServer) -> None:
    page.goto(f"{live_server.url}/healthz")
    assert '"ok"' in page.inner_text("body")
    check_clean(page)
    outcome = page.evaluate(
        """async () => {
            try { await fetch('http://192.0.2.1/x.js'); return 'fetched'; }
            catch (e) { return 'refused'; }
        }"""
    )
    assert outcome == "refused"
    assert page.guard.outside == ["http://192.0.2.1/x.js"]
    page.evaluate("console.warn('careful')")
    page.wait_for_timeout(50)
    assert any("careful" in c for c in page.guard.console)
    with pytest.raises(AssertionError, match="192.0.2.1"):
        check_clean(page)
    page.guard.outside.clear(), page.guard.console.clear(), page.guard.errors.clear()


def test_data_needs_the_token(live_server: LiveServer) -> None:
    import httpx

    query = {"query": "{ connectors { name } }"}
    refused = httpx.post(f"{live_server.url}/graphql", json=query, timeout=30)
    assert refused.status_code == 401
    assert live_server.gql("{ connectors { name } }")["connectors"] == [
        {"name": "aws-bills"},
        {"name": "demo"},
    ]
    assert live_server.url.startswith(f"http://{ALLOWED_HOST}:")
