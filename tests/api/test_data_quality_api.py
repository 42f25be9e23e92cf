"""``dataQuality`` and the findings in ``connectors`` over HTTP on the real app (both databases): the
findings two billing connectors' imports stored, counted by rule with examples, by window and
provider, paged; account-wide (a scoped token gets FORBIDDEN)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from api.conftest import Gql, serve
from billing.billing_fakes import OCT, SEP, FakeBillingConfig, FakeBillingSource, batch, usage
from sqlalchemy import Engine

from connectors.billing import BillingBatch, RefusedRow
from connectors.sdk.billing import Finding
from service.auth.tokens import TokenStore
from service.billing.ingest import ingest_billing

AUG = dt.datetime(2025, 8, 1, tzinfo=dt.UTC)
NOW = dt.datetime(2025, 10, 3, tzinfo=dt.UTC)
W_SEP = {"start": "2025-09-01T00:00:00Z", "end": "2025-10-01T00:00:00Z"}
W_AUG = {"start": "2025-08-01T00:00:00Z", "end": "2025-09-01T00:00:00Z"}
FREQ = "not one of One-Time, Recurring, Usage-Based"
NEG = "negative on a Usage row that is not a correction"
QUERY = """query($w: TimeWindow!, $p: String, $first: Int, $after: String) {
  dataQuality(window: $w, provider: $p, first: $first, after: $after) {
    rule column provider reason rows files cursor examples { file line value } } }"""


def _import(engine: Engine, name: str, *batches: BillingBatch) -> None:
    src = FakeBillingSource(FakeBillingConfig(name=name, type="fakebills"), batches=list(batches))
    ingest_billing(engine, name, src, AUG, OCT, clock=lambda: NOW, after_import=lambda e, p: None)


def _with(found: BillingBatch, *findings: Finding) -> BillingBatch:
    found.findings = list(findings)
    return found


def _finding(file: str, rule: str, column: str, reason: str, lines: range, provider: str | None) -> Finding:
    value = {"unknown_value": "Usage-based", "negative_usage": "-1"}.get(rule, "49.9")
    return Finding(file, rule, column, reason, len(lines), tuple((n, value) for n in lines[:5]), provider)


@pytest.fixture
def findings(engine: Engine) -> None:
    """``focus``: two September files of AWS and Oracle rows; ``cur``: an August and a September
    file of AWS rows (its findings name no provider: they take the lines'), one row refused."""
    oracle = [usage("o1", provider="oracle"), usage("a1")]
    focus = _with(
        batch("focus.csv", oracle),
        _finding("focus.csv", "negative_usage", "ConsumedQuantity", NEG, range(2, 14), "oracle"),
        _finding("focus.csv", "unknown_value", "ChargeFrequency", FREQ, range(20, 27), "oracle"),
        _finding(
            "focus.csv", "gpu_hours_over_capacity", "UsageQuantity", "over capacity", range(40, 41), None
        ),
    )
    focus_2 = _with(
        batch("focus-2.csv", [usage("o2", provider="oracle"), usage("a2")]),
        _finding("focus-2.csv", "unknown_value", "ChargeFrequency", FREQ, range(2, 4), "oracle"),
    )
    _import(engine, "focus", focus, focus_2)
    august = _with(
        batch("cur-08.csv", [usage("c8", charge_start=AUG, charge_end=AUG + dt.timedelta(days=1))]),
        _finding("cur-08.csv", "negative_usage", "ConsumedQuantity", NEG, range(5, 7), None),
    )
    august.period_start, august.period_end = AUG, SEP
    refused = [RefusedRow("cur-09.csv", 9, "BilledCost", "not a number", None, Decimal("1"))]
    september = _with(
        batch("cur-09.csv", [usage("c9")], refused=refused),
        _finding("cur-09.csv", "negative_usage", "ConsumedQuantity", NEG, range(2, 5), None),
    )
    _import(engine, "cur", august, september)


def _data(body: dict[str, Any]) -> Any:
    assert "errors" not in body, body
    return body["data"]


def _ex(file: str, *lines: int, value: str = "Usage-based") -> list[dict[str, Any]]:
    return [{"file": file, "line": n, "value": value} for n in lines]


def _rows(answer: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["rule"], r["column"], r["provider"], r["reason"], r["rows"], r["files"]) for r in answer]


def test_counts_by_rule_with_examples_most_rows_first(findings: None, gql: Gql) -> None:
    answer = _data(gql(QUERY, {"w": W_SEP}))["dataQuality"]
    assert _rows(answer) == [
        ("negative_usage", "ConsumedQuantity", "oracle", NEG, 12, 1),
        ("unknown_value", "ChargeFrequency", "oracle", FREQ, 9, 2),
        ("negative_usage", "ConsumedQuantity", "aws", NEG, 3, 1),
        ("gpu_hours_over_capacity", "UsageQuantity", None, "over capacity", 1, 1),
    ]
    # Up to 5 examples, in file and line order, across files.
    assert answer[1]["examples"] == [*_ex("focus-2.csv", 2, 3), *_ex("focus.csv", 20, 21, 22)]
    assert answer[0]["examples"] == _ex("focus.csv", 2, 3, 4, 5, 6, value="-1")
    assert answer[2]["examples"] == _ex("cur-09.csv", 2, 3, 4, value="-1")
    assert answer[3]["examples"] == _ex("focus.csv", 40, value="49.9")


def test_by_provider_and_window(findings: None, gql: Gql) -> None:
    oracle = _data(gql(QUERY, {"w": W_SEP, "p": "ORACLE"}))["dataQuality"]
    assert [(r["rule"], r["rows"]) for r in oracle] == [("negative_usage", 12), ("unknown_value", 9)]
    aws = _data(gql(QUERY, {"w": W_SEP, "p": "aws"}))["dataQuality"]
    assert _rows(aws) == [("negative_usage", "ConsumedQuantity", "aws", NEG, 3, 1)]
    august = _data(gql(QUERY, {"w": W_AUG}))["dataQuality"]
    assert _rows(august) == [("negative_usage", "ConsumedQuantity", "aws", NEG, 2, 1)]
    assert august[0]["examples"] == _ex("cur-08.csv", 5, 6, value="-1")
    assert _data(gql(QUERY, {"w": W_SEP, "p": "gcp"}))["dataQuality"] == []


def test_pages_with_first_and_after(findings: None, gql: Gql) -> None:
    first = _data(gql(QUERY, {"w": W_SEP, "first": 2}))["dataQuality"]
    assert [r["rows"] for r in first] == [12, 9]
    rest = _data(gql(QUERY, {"w": W_SEP, "first": 2, "after": first[-1]["cursor"]}))["dataQuality"]
    assert [r["rows"] for r in rest] == [3, 1]
    assert rest[1]["examples"] == _ex("focus.csv", 40, value="49.9")
    bad = gql(QUERY, {"w": W_SEP, "after": "bm90IG91cnM="})
    assert bad["errors"][0]["extensions"]["code"] == "INVALID_ARGUMENT"
    unaligned = gql(QUERY, {"w": {"start": "2025-09-01T00:30:00Z", "end": "2025-10-01T00:00:00Z"}})
    assert unaligned["errors"][0]["extensions"]["code"] == "WINDOW_NOT_ALIGNED"


def test_connectors_show_the_last_runs_findings_and_why_it_is_degraded(findings: None, gql: Gql) -> None:
    query = "{ connectors { name status lastError lastRunFindings } }"
    assert _data(gql(query))["connectors"] == [
        {
            "name": "cur",
            "status": "DEGRADED",
            # 1 of 3 rows; its cost, 1 of 2642.92 (0.04 %), is within max_refused_cost_pct
            "lastError": "refused 1 of 3 rows read (33.33 % > max_refused_rows_pct 1 %) (what was "
            "accepted is imported; see the rejections)",
            "lastRunFindings": 5,
        },
        {"name": "focus", "status": "OK", "lastError": None, "lastRunFindings": 22},
    ]


@pytest.fixture
def scoped(engine: Engine, findings: None) -> Iterator[dict[str, str]]:
    store = TokenStore(engine)
    secrets = {
        s: store.create(f"dq-{s.replace(':', '-')}", [s])[0]
        for s in ("read", "read:project:alpha", "read:team:ml")
    }
    for base in serve(engine, auth={}):
        yield {"base": base, **secrets}


def test_a_scoped_token_is_forbidden(scoped: dict[str, str]) -> None:
    def ask(scope: str) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {scoped[scope]}"}
        body = {"query": QUERY, "variables": {"w": W_SEP}}
        reply: dict[str, Any] = httpx.post(
            f"{scoped['base']}/graphql", json=body, headers=headers, timeout=30
        ).json()
        return reply

    for scope in ("read:project:alpha", "read:team:ml"):
        body = ask(scope)
        assert body["data"] is None and [e["extensions"]["code"] for e in body["errors"]] == ["FORBIDDEN"]
        assert body["errors"][0]["message"] == "dataQuality is account-wide data: it needs the `read` scope"
    assert len(_data(ask("read"))["dataQuality"]) == 4
