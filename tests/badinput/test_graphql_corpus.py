"""Hostile and careless requests to ``POST /graphql``: each gets an exact HTTP status and
``extensions.code``, never a 500, and nothing is logged with a traceback.

Bodies that are not a GraphQL request are refused by HTTP status (400, 413) before any GraphQL
runs; documents that are one but break a rule are GraphQL errors of a 200 answer (the
GraphQL-over-HTTP convention for ``application/json``), ``data`` null, nothing executed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from service.app import create_app
from service.db import make_engine
from service.settings import Settings

JSON = "application/json"
USAGE = "query($w: TimeWindow!) { usage(window: $w) { gpuHours } }"
DEVICES = "query($f: Int) { devices(first: $f) { edges { cursor } } }"
W = {"start": "2025-01-06T00:00:00Z", "end": "2025-01-07T00:00:00Z"}
BAD, INVALID = "BAD_REQUEST", "GRAPHQL_VALIDATION_FAILED"
NOT_OBJECT = 'expected a JSON object like {"query": "…"}, got '
NOT_JSON = "request body is not valid JSON: "
BAD_VARIABLE = "Variable '$f' has invalid value: Int cannot represent"


def doc(query: str, **more: Any) -> bytes:
    return json.dumps({"query": query, **more}).encode()


def nested_introspection(levels: int) -> str:
    inner = "name"
    for _ in range(levels):
        inner = f"fields {{ type {{ {inner} }} }}"
    return "{ __schema { types { " + inner + " } } }"


@dataclass(frozen=True)
class Case:
    body: bytes
    status: int
    code: str
    message: str  # the first error's message starts with this
    content_type: str = JSON
    extra: dict[str, str] = field(default_factory=dict)


CASES: dict[str, Case] = {
    # --- bodies that are not a GraphQL request: 400 ---
    "json string": Case(b'"x"', 400, BAD, NOT_OBJECT + "a string"),
    "json number": Case(b"123", 400, BAD, NOT_OBJECT + "a number"),
    "json null": Case(b"null", 400, BAD, NOT_OBJECT + "null"),
    "json boolean": Case(b"true", 400, BAD, NOT_OBJECT + "a boolean"),
    "empty array": Case(b"[]", 400, BAD, "Batching is not enabled"),
    "batched array": Case(
        b'[{"query": "{ __typename }"}, {"query": "{ __typename }"}]', 400, BAD, "Batching is not enabled"
    ),
    "truncated json": Case(b'{"query": "{ __typ', 400, BAD, NOT_JSON),
    "empty body": Case(b"", 400, BAD, NOT_JSON + "Expecting value"),
    "invalid utf-8": Case(
        b'{"query": "{ \xff\xfe __typename }"}', 400, BAD, "request body is not UTF-8 text"
    ),
    "json nested 100k deep": Case(
        b'{"query": "{ __typename }", "variables": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_001,
        400,
        BAD,
        NOT_JSON + "maximum recursion depth exceeded",
    ),
    "text/plain": Case(doc("{ __typename }"), 400, BAD, "Unsupported content type", "text/plain"),
    "form upload": Case(
        b"--x\r\n\r\n--x--", 400, BAD, "Unsupported content type", "multipart/form-data; boundary=x"
    ),
    "no query": Case(b"{}", 400, BAD, "No GraphQL query found in the request"),
    "query not a string": Case(b'{"query": 5}', 400, BAD, "The GraphQL operation's `query` must be a string"),
    "variables a list": Case(
        doc(USAGE, variables=[1]), 400, BAD, "The GraphQL operation's `variables` must be an object"
    ),
    "unknown operationName": Case(
        doc("query A { __typename }", operationName="B"), 400, BAD, 'Unknown operation named "B".'
    ),
    "11 MB body": Case(
        b" " * (11 * 1024 * 1024), 413, "PAYLOAD_TOO_LARGE", "request body larger than 1048576 bytes"
    ),
    # --- documents over the limits: GraphQL errors, nothing executed ---
    "1000 aliases": Case(
        doc(
            "{"
            + " ".join(f'a{i}: usage(window: {{start: "x", end: "y"}}) {{ gpuHours }}' for i in range(1000))
            + "}"
        ),
        200,
        "TOO_MANY_TOKENS",
        "Syntax Error: Document contains more than 2000 tokens. Parsing aborted.",
    ),
    "40 aliases": Case(
        doc("{" + " ".join(f"a{i}: __typename" for i in range(40)) + "}"),
        200,
        "TOO_MANY_ALIASES",
        "40 aliases found. Allowed: 30",
    ),
    "40 introspection aliases": Case(
        doc("{" + " ".join(f"s{i}: __schema {{ types {{ name }} }}" for i in range(40)) + "}"),
        200,
        "TOO_MANY_ALIASES",
        "40 aliases found. Allowed: 30",
    ),
    "token flood": Case(
        doc("{" + " __typename" * 3000 + "}"),
        200,
        "TOO_MANY_TOKENS",
        "Syntax Error: Document contains more than 2000 tokens.",
    ),
    "comment flood": Case(
        doc("#\n" * 3000 + "{ __typename }"),
        200,
        "TOO_MANY_TOKENS",
        "Syntax Error: Document contains more than 2000 comments.",
    ),
    "nesting 600 deep": Case(
        doc("{a" * 600 + "}" * 600),
        200,
        "QUERY_TOO_DEEP",
        "Syntax Error: Document is nested too deeply. Parsing aborted.",
    ),
    "introspection 14 deep": Case(
        doc(nested_introspection(7)), 200, "QUERY_TOO_DEEP", "Maximum introspection depth exceeded"
    ),
    "fields 14 deep": Case(
        doc("{" + " a {" * 14 + " b" + " }" * 14 + " }"),
        200,  # checked before the schema
        "QUERY_TOO_DEEP",
        "'anonymous' exceeds maximum operation depth of 12",
    ),
    # --- documents that are wrong: GraphQL validation errors ---
    "syntax error": Case(doc("{ usage("), 200, INVALID, "Syntax Error: Expected Name, found <EOF>."),
    "NUL character": Case(
        doc("{ __typename \u0000 }"), 200, INVALID, "Syntax Error: Unexpected character: U+0000."
    ),
    "unknown field": Case(doc("{ nope }"), 200, INVALID, "Cannot query field 'nope' on type 'Query'."),
    "100k-char field name": Case(doc("{ " + "a" * 100_000 + " }"), 200, INVALID, "Cannot query field 'aaaa"),
    "fragment cycle": Case(
        doc("{ ...A } fragment A on Query { ...B } fragment B on Query { ...A }"),
        200,
        INVALID,
        "Cannot spread fragment 'A' within itself via 'B'.",
    ),
    "mutation": Case(
        doc("mutation { x }"), 200, INVALID, "The mutation operation is not supported by the schema."
    ),
    "subscription": Case(
        doc("subscription { x }"), 200, INVALID, "The subscription operation is not supported by the schema."
    ),
    "repeated directive": Case(
        doc("{ __typename" + " @skip(if: false)" * 50 + " }"),
        200,
        INVALID,
        "The directive '@skip' can only be used once",
    ),
    "missing variable": Case(
        doc(USAGE),
        200,
        INVALID,
        "Variable '$w' has invalid value: Expected a value of non-null type 'TimeWindow!' to be provided.",
    ),
    "variable of the wrong type": Case(
        doc(USAGE, variables={"w": {"start": 5, "end": True}}),
        200,
        INVALID,
        "Variable '$w' has invalid value at .start",
    ),
    "900 kB string variable": Case(
        doc(USAGE, variables={"w": {"start": "x" * 900_000, "end": W["end"]}}),
        200,
        INVALID,
        "Variable '$w' has invalid value at .start",
    ),
    "NaN variable": Case(
        DEVICES.join(['{"query": "', '", "variables": {"f": NaN}}']).encode(), 200, INVALID, BAD_VARIABLE
    ),
    "Infinity variable": Case(
        DEVICES.join(['{"query": "', '", "variables": {"f": 1e400}}']).encode(), 200, INVALID, BAD_VARIABLE
    ),
    "20-digit Int": Case(
        doc(DEVICES, variables={"f": 10**20}), 200, INVALID, BAD_VARIABLE + " non 32-bit signed integer"
    ),
    # --- well formed, wrong for the domain: the resolver's own code ---
    "window end before start": Case(
        doc(USAGE, variables={"w": {"start": W["end"], "end": W["start"]}}),
        200,
        "INVALID_WINDOW",
        "window end 2025-01-06T00:00:00+00:00 must be after start 2025-01-07T00:00:00+00:00",
    ),
}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Any) -> Iterator[Any]:
    import shutil

    path = tmp_path_factory.mktemp("corpus") / "ledger.db"
    shutil.copyfile(_sqlite_template, path)
    engine: Engine = make_engine(f"sqlite:///{path}")
    # The rate limit stays on (its default burst is 100 per caller): one caller sends the corpus.
    yield create_app(Settings(database_url=f"sqlite:///{path}", auth={"anonymous_read": True}), engine)
    engine.dispose()


def send(app: Any, case: Case) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ledger") as c:
            headers = {"Content-Type": case.content_type, **case.extra}
            return await c.post("/graphql", content=case.body, headers=headers)

    return asyncio.run(go())


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_request(app: Any, name: str, caplog: pytest.LogCaptureFixture) -> None:
    case = CASES[name]
    caplog.set_level(logging.INFO)
    r = send(app, case)
    assert r.status_code == case.status, r.text[:500]
    assert r.headers["content-type"] == JSON
    body = r.json()
    errors = body["errors"]
    assert errors[0]["extensions"]["code"] == case.code, errors[0]
    assert errors[0]["message"].startswith(case.message), errors[0]["message"][:300]
    assert {e["extensions"]["code"] for e in errors} == {case.code}
    if case.status == 200:
        assert body["data"] is None
    assert all(len(e["message"]) <= 500 for e in errors)  # a 900 kB value is not echoed back whole
    assert "Traceback" not in r.text and "internal error" not in r.text
    assert not [rec for rec in caplog.records if rec.exc_info or rec.levelno >= logging.ERROR]
    assert "Traceback" not in caplog.text


def test_corpus_size() -> None:
    assert len(CASES) >= 20
