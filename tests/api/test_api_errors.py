"""Errors come back as GraphQL errors with extensions.code, never a stack trace."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from conftest import Gql, client, serve

from service.db import make_engine

USAGE = "query($w: TimeWindow!){ usage(window: $w) { gpuHours } }"


@pytest.mark.parametrize(
    ("start", "end", "code"),
    [
        ("2025-02-01T00:00:00Z", "2025-01-01T00:00:00Z", "INVALID_WINDOW"),
        ("2025-01-01T00:00:00Z", "2025-01-01T00:00:00Z", "INVALID_WINDOW"),
        ("2025-01-01T00:00:00", "2025-01-02T00:00:00Z", "INVALID_WINDOW"),  # naive: no timezone
        ("2023-01-01T00:00:00Z", "2025-01-01T00:00:00Z", "WINDOW_TOO_LARGE"),
        ("2025-01-01T00:30:00Z", "2025-01-02T00:00:00Z", "WINDOW_NOT_ALIGNED"),
        ("2025-01-01T00:00:00+05:30", "2025-01-02T00:00:00Z", "WINDOW_NOT_ALIGNED"),
    ],
)
def test_window_errors(gql: Gql, start: str, end: str, code: str) -> None:
    r = gql(USAGE, {"w": {"start": start, "end": end}})
    [err] = r["errors"]
    assert err["extensions"] == {"code": code} and r["data"] is None
    assert err["path"] == ["usage"] and err["message"]


def test_inline_literal_window_error(gql: Gql) -> None:
    r = gql('{ usage(window: {start: "2025-02-01T00:00:00Z", end: "2025-01-01T00:00:00Z"}) { gpuHours } }')
    assert r["errors"][0]["extensions"]["code"] == "INVALID_WINDOW"
    assert "must be after start" in r["errors"][0]["message"]


@pytest.mark.parametrize(
    ("query", "variables"),
    [
        ("{ usage { gpuHours } }", None),  # missing argument
        ("{ usage(window: {start: \"x\", end: \"y\"}) { gpuHours } }", None),  # not a DateTime
        (USAGE, {"w": {"start": "yesterday", "end": "2025-01-01T00:00:00Z"}}),
        ("{ usage(window: {start: \"2025-01-01T00:00:00Z\", end: \"2025-01-02T00:00:00Z\"}, "
         "groupBy: [COLOR]) { gpuHours } }", None),  # unknown dimension
        ("{ nope }", None),
        ("{ usage(", None),
    ],
)  # fmt: skip
def test_malformed_queries(gql: Gql, query: str, variables: dict[str, object] | None) -> None:
    r = gql(query, variables)
    assert r["errors"] and all(e["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED" for e in r["errors"]), r


def test_unexpected_errors_are_masked(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}")  # no tables: every query fails
    try:
        for base in serve(engine):
            r = client(base)(USAGE, {"w": {"start": "2025-01-01T00:00:00Z", "end": "2025-01-02T00:00:00Z"}})
            assert r["errors"] == [
                {"message": "internal error", "locations": [{"line": 1, "column": 25}], "path": ["usage"],
                 "extensions": {"code": "INTERNAL"}}
            ]  # fmt: skip
            assert "ledger_hour" not in json.dumps(r)  # no SQL, no table names
            assert (
                httpx.get(f"{base}/graphql", headers={"Accept": "text/html"}).status_code == 200
            )  # GraphiQL
    finally:
        engine.dispose()
    assert any("no such table" in (rec.exc_text or "") for rec in caplog.records)  # logged on the server


def test_every_type_and_field_is_described() -> None:
    from service.api.graphql import schema

    gql_schema = schema._schema
    for name, t in gql_schema.type_map.items():
        if name.startswith("__") or name in {"String", "Float", "Int", "Boolean", "ID", "DateTime"}:
            continue
        assert t.description, name
        for fname, f in getattr(t, "fields", {}).items():
            assert f.description, f"{name}.{fname}"
            for aname, a in getattr(f, "args", {}).items():
                assert a.description, f"{name}.{fname}({aname})"


_NUL_WINDOW = '{start: "2025-01-01T00:00:00Z", end: "2025-01-02T00:00:00Z"}'


@pytest.mark.parametrize(
    "field",
    [
        f"usage(window: {_NUL_WINDOW}, filter: $f) {{ gpuHours }}",
        f"cost(window: {_NUL_WINDOW}, filter: $f) {{ gpuHours }}",
        f"idleWaste(window: {_NUL_WINDOW}, filter: $f) {{ idleGpuHours }}",
        f"effectiveCost(window: {_NUL_WINDOW}, filter: $f) {{ gpuHours }}",
    ],
)
def test_nul_in_a_filter_value_is_the_callers_error(gql: Gql, field: str) -> None:
    """PostgreSQL text cannot hold NUL: it used to fail in the driver (INTERNAL) on PostgreSQL."""
    r = gql(f"query($f: LedgerFilter){{ {field} }}", {"f": {"project": ["ok", "a\x00b"]}})
    [err] = r["errors"]
    assert err["extensions"] == {"code": "INVALID_ARGUMENT"} and "NUL" in err["message"], r
