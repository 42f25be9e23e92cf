"""Document limits (depth, aliases, tokens), the SQL time limit and the per-caller rate, in-process.

The done-when line "1,000 aliases are refused before any SQL runs" is
``test_1000_aliases_are_refused_before_any_sql``: it counts every statement the engine sends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, event, text

from service.analytics.errors import QueryError
from service.api.context import ApiContext, ApiSettings
from service.app import create_app
from service.limits import Limits
from service.limits.rate import RateLimiter
from service.settings import ConfigError, Settings, load_settings

W = {"start": "2025-01-06T00:00:00Z", "end": "2025-01-07T00:00:00Z"}
COST = "cost(window: $w, groupBy: [DEVICE]) { device cost { amount currency } }"


def app_of(engine: Engine, **limits: Any) -> Any:
    settings = Settings(database_url=str(engine.url), auth={"anonymous_read": True}, limits=limits)
    return create_app(settings, engine)


def post(
    app: Any, query: str, variables: dict[str, Any] | None = None, client: str = "10.0.0.1"
) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=(client, 50000))
        async with httpx.AsyncClient(transport=transport, base_url="http://ledger") as c:
            return await c.post("/graphql", json={"query": query, "variables": variables or {}})

    return asyncio.run(go())


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[str]]:
    """Every SQL statement ``engine`` sends while the test runs."""
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    yield seen
    event.remove(engine, "before_cursor_execute", count)


def aliases(n: int) -> str:
    return "query($w: TimeWindow!) {" + " ".join(f"a{i}: {COST}" for i in range(n)) + "}"


def only_error(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["data"] is None and len(body["errors"]) == 1, body
    error: dict[str, Any] = body["errors"][0]
    return error


def test_1000_aliases_are_refused_before_any_sql(engine: Engine, statements: list[str]) -> None:
    app = app_of(engine)
    assert post(app, aliases(2), {"w": W}).json() == {"data": {"a0": [], "a1": []}}
    assert statements, "the counter sees the SQL of an answered query"

    statements.clear()
    error = only_error(post(app, aliases(1000), {"w": W}))  # ~15,000 tokens: parsing stops at 2,000
    assert error["extensions"] == {"code": "TOO_MANY_TOKENS"}
    assert error["message"] == "Syntax Error: Document contains more than 2000 tokens. Parsing aborted."
    assert statements == []

    roomy = app_of(engine, max_tokens=100_000)  # past the token limit, the alias limit refuses it
    error = only_error(post(roomy, aliases(1000), {"w": W}))
    assert error == {"message": "1000 aliases found. Allowed: 30", "extensions": {"code": "TOO_MANY_ALIASES"}}
    assert statements == []


def test_alias_limit_is_the_setting(engine: Engine) -> None:
    app = app_of(engine, max_aliases=3)
    assert post(app, aliases(3), {"w": W}).json() == {"data": {"a0": [], "a1": [], "a2": []}}
    assert only_error(post(app, aliases(4), {"w": W}))["extensions"] == {"code": "TOO_MANY_ALIASES"}


def test_depth_limit(engine: Engine, statements: list[str]) -> None:
    deep = "{ devices(first: 1) { edges { node { deviceId } } } }"  # depth 3 (devices is 0)
    assert post(app_of(engine, max_depth=3), deep).json() == {"data": {"devices": {"edges": []}}}
    statements.clear()
    error = only_error(post(app_of(engine, max_depth=2), deep))
    assert error["extensions"] == {"code": "QUERY_TOO_DEEP"}
    assert error["message"] == "'anonymous' exceeds maximum operation depth of 2"
    assert statements == []


def test_a_document_too_deep_to_parse_is_query_too_deep(engine: Engine) -> None:
    error = only_error(post(app_of(engine), "{a" * 600 + "}" * 600))  # 1,200 tokens
    assert error["extensions"] == {"code": "QUERY_TOO_DEEP"}
    assert error["message"] == "Syntax Error: Document is nested too deeply. Parsing aborted."


def test_comments_count_against_the_token_limit(engine: Engine) -> None:
    error = only_error(post(app_of(engine, max_tokens=50), "#\n" * 60 + "{ __typename }"))
    assert error["extensions"] == {"code": "TOO_MANY_TOKENS"}


# --- the time limit ---------------------------------------------------------------------------

SLOW_SQL = {
    # Counts forever: only the progress handler stops it.
    "sqlite": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n",
    "postgresql": "SELECT pg_sleep(30)",
}


@pytest.mark.serial
def test_slow_sql_is_cancelled_at_the_deadline(engine: Engine) -> None:
    settings = ApiSettings(limits=Limits(request_timeout_s=0.3))
    context = ApiContext(engine, settings, deadline=time.monotonic() + 0.3)
    started = time.monotonic()
    with pytest.raises(QueryError) as caught:
        asyncio.run(context.read(lambda conn: conn.execute(text(SLOW_SQL[engine.dialect.name])).scalar()))
    took_s = time.monotonic() - started
    assert caught.value.code == "QUERY_TIMEOUT" and 0.25 < took_s < 2.0, took_s
    assert caught.value.message.startswith("query stopped after the time limit of 0.3 s")
    # The pool's connections still work, and the limit does not outlive the request.
    after = ApiContext(engine, settings)
    assert asyncio.run(after.read(lambda conn: conn.execute(text("SELECT 1")).scalar())) == 1
    assert asyncio.run(ApiContext(engine, settings, deadline=time.monotonic() + 5).read(
        lambda conn: conn.execute(text("SELECT 2")).scalar())) == 2  # fmt: skip


def test_query_timeout_over_graphql(engine: Engine, statements: list[str]) -> None:
    # A limit shorter than any query: the deadline has passed before the first statement starts.
    r = post(app_of(engine, request_timeout_s=1e-9), f"query($w: TimeWindow!) {{ {COST} }}", {"w": W})
    body = r.json()
    assert r.status_code == 200 and body["data"] is None
    assert [e["extensions"]["code"] for e in body["errors"]] == ["QUERY_TIMEOUT"]
    assert body["errors"][0]["path"] == ["cost"]
    # no ledger query was started (the answer cache's read of the ledger version is none)
    assert not [s for s in statements if "ledger" in s and "ledger_version" not in s]


# --- the rate ---------------------------------------------------------------------------------


def test_rate_limit_per_caller(engine: Engine) -> None:
    app = app_of(engine, rate_per_minute=60, rate_burst=3)
    answers = [post(app, "{ __typename }") for _ in range(4)]
    assert [r.status_code for r in answers] == [200, 200, 200, 429]
    assert answers[3].headers["retry-after"] == "1"
    assert answers[3].json() == {"errors": [{
        "message": "more than 60 requests a minute from anonymous@10.0.0.1: retry in 1 s",
        "extensions": {"code": "RATE_LIMITED"}}]}  # fmt: skip
    assert post(app, "{ __typename }", client="10.0.0.2").status_code == 200  # another caller


def test_token_bucket_refills_at_the_rate() -> None:
    now = [0.0]
    limiter = RateLimiter(per_minute=6, burst=2, clock=lambda: now[0])
    assert [limiter.take("a"), limiter.take("a")] == [0.0, 0.0]
    assert limiter.take("a") == pytest.approx(10.0)  # one request per 10 s
    now[0] = 9.0
    assert limiter.take("a") == pytest.approx(1.0)
    now[0] = 10.0
    assert limiter.take("a") == 0.0 and limiter.take("b") == 0.0
    assert RateLimiter(per_minute=0, burst=1).take("a") == 0.0  # 0 = no limit


# --- the settings -----------------------------------------------------------------------------


def test_limits_from_the_file_and_the_environment(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "ledger.toml"
    config.write_text("[limits]\nmax_depth = 8\nmax_body_b = 2048\n")
    monkeypatch.setenv("GPU_LEDGER_LIMITS__MAX_DEPTH", "6")
    monkeypatch.setenv("GPU_LEDGER_LIMITS__RATE_PER_MINUTE", "0")
    limits = load_settings(config).limits
    assert (limits.max_depth, limits.max_body_b, limits.rate_per_minute, limits.max_aliases) == (
        6,
        2048,
        0,
        30,
    )
    monkeypatch.setenv("GPU_LEDGER_LIMITS__MAX_DEPHT", "6")
    with pytest.raises(ConfigError, match=r"\[limits\]: key \"max_depht\": unknown key"):
        load_settings(config)


def test_the_rate_is_counted_per_authenticated_caller() -> None:
    from service.api.graphql import caller_key
    from service.auth.principal import PRINCIPAL_KEY, Principal

    token = Principal.of("grafana", "token", ["read"])
    assert caller_key({PRINCIPAL_KEY: token, "client": ("10.0.0.1", 1)}) == "token:grafana"
    assert caller_key({PRINCIPAL_KEY: token, "client": ("10.0.0.2", 1)}) == "token:grafana"  # any address
    assert caller_key({"client": ("10.0.0.3", 1)}) == "anonymous@10.0.0.3"
