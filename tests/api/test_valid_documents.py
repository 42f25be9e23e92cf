"""Documents known valid (service.api.guard.ValidDocuments): the same query again is neither parsed
nor validated, and answers as before; whatever decided the validation (the limits) is in the key;
refusals are worked out again every time."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from graphql import parse
from sqlalchemy import Engine

from service.api import guard
from service.api.graphql import build_schema, schema
from service.app import create_app
from service.limits import Limits
from service.settings import Settings

W = {"start": "2025-01-06T00:00:00Z", "end": "2025-01-07T00:00:00Z"}
PAGE = "query($w: TimeWindow!, $n: Int) { usage(window: $w, groupBy: [DEVICE], first: $n) { device cursor } }"
DEEP = "{ devices(first: 1) { edges { node { deviceId } } } }"  # depth 3


def app_of(engine: Engine, **limits: Any) -> Any:
    settings = Settings(database_url=str(engine.url), auth={"anonymous_read": True}, limits=limits)
    return create_app(settings, engine)


def post(app: Any, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=("10.0.0.1", 50000))
        async with httpx.AsyncClient(transport=transport, base_url="http://ledger") as c:
            return await c.post("/graphql", json={"query": query, "variables": variables or {}})

    r = asyncio.run(go())
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How often the guard parsed and validated, from an empty set of known documents."""
    counted = {"parse": 0, "validate": 0}
    parse_limited, validate_limited = guard.parse_limited, guard.validate_limited

    def parse_counted(*args: Any) -> Any:
        counted["parse"] += 1
        return parse_limited(*args)

    def validate_counted(*args: Any) -> Any:
        counted["validate"] += 1
        return validate_limited(*args)

    monkeypatch.setattr(guard, "parse_limited", parse_counted)
    monkeypatch.setattr(guard, "validate_limited", validate_counted)
    guard.VALID_DOCUMENTS.clear()
    yield counted
    guard.VALID_DOCUMENTS.clear()


def test_the_same_query_is_parsed_and_validated_once(engine: Engine, calls: dict[str, int]) -> None:
    app = app_of(engine)
    first = post(app, PAGE, {"w": W, "n": 10})
    assert first == {"data": {"usage": []}}
    assert calls == {"parse": 1, "validate": 1}
    for n in (10, 5, None):  # other variables: the same document
        assert post(app, PAGE, {"w": W, "n": n}) == first
    assert calls == {"parse": 1, "validate": 1}
    post(app, PAGE + " ", {"w": W})  # another text: parsed and validated
    assert calls == {"parse": 2, "validate": 2}


def test_the_limits_decide_again(engine: Engine, calls: dict[str, int]) -> None:
    """A document kept under roomy limits is still refused under tighter ones (and the other way)."""
    assert post(app_of(engine, max_depth=3), DEEP) == {"data": {"devices": {"edges": []}}}
    refused = post(app_of(engine, max_depth=2), DEEP)
    assert refused["errors"][0]["extensions"] == {"code": "QUERY_TOO_DEEP"}
    assert calls == {"parse": 2, "validate": 2}
    assert post(app_of(engine, max_depth=3), DEEP) == {"data": {"devices": {"edges": []}}}
    assert calls == {"parse": 2, "validate": 2}  # the roomy limits' document was kept


def test_refusals_are_worked_out_every_time(engine: Engine, calls: dict[str, int]) -> None:
    app = app_of(engine)
    unknown = "{ devices(first: 1) { edges { node { nope } } } }"
    syntax = "{ devices(first: 1) { edges "
    for _ in range(2):
        error = post(app, unknown)["errors"][0]
        assert error["message"] == "Cannot query field 'nope' on type 'Device'. Did you mean 'node'?"
        assert error["extensions"] == {"code": "GRAPHQL_VALIDATION_FAILED"}
        assert post(app, syntax)["errors"][0]["extensions"] == {"code": "GRAPHQL_VALIDATION_FAILED"}
    assert calls == {"parse": 4, "validate": 2}


def test_least_recently_used_out_and_long_queries_not_kept() -> None:
    known = guard.ValidDocuments(size=2, max_chars=40)
    rules = tuple(schema.validation_rules) if hasattr(schema, "validation_rules") else ()
    graphql_schema = schema._schema
    a, b, c = (known.key(q, graphql_schema, rules, Limits()) for q in ("{ a }", "{ b }", "{ c }"))
    assert a is not None and b is not None and c is not None
    for key in (a, b):
        known.put(key, parse("{ __typename }"))
    assert known.get(a) is not None  # a used last: b goes first
    known.put(c, parse("{ __typename }"))
    assert (known.get(a) is not None, known.get(b), known.get(c) is not None) == (True, None, True)
    assert known.key("{ " + "x " * 30 + "}", graphql_schema, rules, Limits()) is None
    # another schema (compared by identity) is another key
    other = build_schema(leaf_lists=False)._schema
    assert known.key("{ a }", other, rules, Limits()) != a
