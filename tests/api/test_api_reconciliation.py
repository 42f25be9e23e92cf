"""``reconciliation``, ``billingLines`` and ``rates`` over HTTP on the real app (both databases)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from api.conftest import Gql
from billing.billing_rows import R1, add, scenario
from sqlalchemy import Engine

from service.billing.rates import reprice

SEP = {"start": "2025-09-01T00:00:00Z", "end": "2025-10-01T00:00:00Z"}
RECON = """query($w: TimeWindow!, $g: [ReconciliationDimension!], $f: ReconciliationFilter, $t: Float) {
  reconciliation(window: $w, groupBy: $g, filter: $f, tolerancePct: $t) {
    provider account resource day billedGpuHours meteredGpuHours gpuHoursVariance gpuHoursVariancePct
    billedCost { amount currency } ledgerCost { amount } costVariance { amount } billingLines status
  }
}"""
LINES = """query($f: BillingLineFilter, $first: Int!, $after: String) {
  billingLines(filter: $f, first: $first, after: $after) {
    totalCount pageInfo { hasNextPage hasPreviousPage endCursor }
    edges { cursor node { resourceId chargeCategory gpuHours gpuCount effectiveCost { amount currency } } }
  }
}"""


def _load(engine: Engine) -> None:
    add(engine, scenario())
    reprice(engine, dt.datetime(2025, 9, 1, tzinfo=dt.UTC), dt.datetime(2025, 10, 1, tzinfo=dt.UTC))


def _data(body: dict[str, Any]) -> Any:
    assert "errors" not in body, body
    return body["data"]


def _code(body: dict[str, Any]) -> str:
    assert body["data"] is None, body
    return str(body["errors"][0]["extensions"]["code"])


def test_every_status_per_resource_and_day(engine: Engine, gql: Gql) -> None:
    _load(engine)
    rows = _data(gql(RECON, {"w": SEP}))["reconciliation"]
    got = [(r["resource"], r["billedGpuHours"], r["meteredGpuHours"], r["billedCost"]["amount"],
            r["ledgerCost"]["amount"], r["status"]) for r in rows]  # fmt: skip
    assert got == [
        (R1, 96.0, 0.0, "660.480000000", "660.480000000", "NO_METRICS"),
        ("i-gap", 32.0, 16.0, "220.160000000", "220.160000000", "UNMONITORED_SPEND"),
        ("i-match", 24.0, 24.0, "165.120000000", "165.120000000", "MATCHED"),
        ("i-nobill", 0.0, 8.0, "0.000000000", "0.000000000", "NO_BILLING"),
        ("i-over", 4.0, 6.0, "22.688000000", "22.688000000", "UNBILLED_USAGE"),
        ("i-unknown", 0.0, 0.0, "100.000000000", "0.000000000", "UNKNOWN_INSTANCE_TYPE"),
        (None, 0.0, 0.0, "746.880000000", "0.000000000", "UNUSED_COMMITMENT"),
    ]
    gap = rows[1]
    assert (gap["day"], gap["account"], gap["gpuHoursVariance"], gap["gpuHoursVariancePct"]) == (
        "2025-09-03", "111122223333", -16.0, -50.0,
    )  # fmt: skip
    assert rows[-1]["provider"] == "azure" and rows[-1]["billedCost"]["currency"] == "USD"

    tolerant = _data(gql(RECON, {"w": SEP, "f": {"resource": ["i-gap"]}, "t": 50.0, "g": ["RESOURCE"]}))
    assert [(r["resource"], r["day"], r["status"]) for r in tolerant["reconciliation"]] == [
        ("i-gap", None, "MATCHED")
    ]
    by_provider = _data(gql(RECON, {"w": SEP, "g": ["PROVIDER"], "f": {"provider": ["aws"]}}))[
        "reconciliation"
    ]
    assert [(r["billedGpuHours"], r["meteredGpuHours"], r["ledgerCost"]["amount"], r["status"])
            for r in by_provider][0] == (156.0, 46.0, "1068.448000000", "UNMONITORED_SPEND")  # fmt: skip

    # The ledger's cost answer carries the same bill share: Σ AWS GPU instances' effective cost.
    cost = _data(gql('{ cost(window: {start: "2025-09-01T00:00:00Z", end: "2025-10-01T00:00:00Z"}, '
                     "groupBy: [PROVIDER]) { provider cost { amount currency } } }"))["cost"]  # fmt: skip
    assert [(c["provider"], c["cost"]["amount"], c["cost"]["currency"]) for c in cost] == [
        ("aws", "1068.448000000", "USD"),
        ("aws", "0.000000000", "XXX"),
    ]


def test_billing_lines_page_by_cursor(engine: Engine, gql: Gql) -> None:
    _load(engine)
    first = _data(gql(LINES, {"first": 4}))["billingLines"]
    assert first["totalCount"] == 7 and first["pageInfo"]["hasNextPage"] is True
    seen = [e["node"]["resourceId"] for e in first["edges"]]
    after = first["pageInfo"]["endCursor"]
    while after is not None:
        page = _data(gql(LINES, {"first": 4, "after": after}))["billingLines"]
        assert page["pageInfo"]["hasPreviousPage"] is True
        seen += [e["node"]["resourceId"] for e in page["edges"]]
        after = page["pageInfo"]["endCursor"] if page["pageInfo"]["hasNextPage"] else None
    assert seen == [R1, "i-match", "i-over", "i-gap", "i-unknown", None, "vol-1"]  # import order
    one = _data(gql(LINES, {"first": 5, "f": {"resource": [R1], "window": SEP}}))["billingLines"]
    assert [e["node"] for e in one["edges"]] == [
        {"resourceId": R1, "chargeCategory": "Usage", "gpuHours": "96.000000000", "gpuCount": 8,
         "effectiveCost": {"amount": "660.480000000", "currency": "USD"}}
    ]  # fmt: skip
    assert _code(gql(LINES, {"first": 61})) == "PAGE_SIZE_TOO_LARGE"
    assert _code(gql(LINES, {"first": 5, "after": "bm9wZQ=="})) == "INVALID_ARGUMENT"


def test_rates_and_errors(engine: Engine, gql: Gql) -> None:
    _load(engine)
    query = """query($w: TimeWindow!, $f: RateFilter) { rates(window: $w, filter: $f) {
      sourceKind sourceRef precedence environment instanceId validFrom validTo
      effectivePerGpuHour { amount currency } billedPerGpuHour { amount } listPerGpuHour { amount } } }"""
    rates = _data(gql(query, {"w": SEP, "f": {"instanceId": [R1]}}))["rates"]
    assert rates == [
        {"sourceKind": "billing", "sourceRef": "bills", "precedence": 10, "environment": "aws",
         "instanceId": R1,
         "validFrom": "2025-09-03T00:00:00+00:00", "validTo": "2025-09-03T12:00:00+00:00",
         "effectivePerGpuHour": {"amount": "6.880000000", "currency": "USD"},
         "billedPerGpuHour": {"amount": "6.880000000"}, "listPerGpuHour": {"amount": "6.880000000"}}
    ]  # fmt: skip
    every = _data(gql(query, {"w": SEP}))["rates"]
    assert {r["instanceId"] for r in every} == {R1, "i-match", "i-over", "i-gap"}
    bad = {"start": "2025-09-02T00:00:00Z", "end": "2025-09-01T00:00:00Z"}
    assert _code(gql(RECON, {"w": bad})) == "INVALID_WINDOW"
    assert _code(gql(query, {"w": {"start": "2025-09-01T00:30:00Z", "end": "2025-09-02T00:00:00Z"}})) == (
        "WINDOW_NOT_ALIGNED"
    )
    assert _code(gql(RECON, {"w": SEP, "t": -1.0})) == "INVALID_ARGUMENT"
    assert _code(gql(RECON, {"w": {"start": "2020-01-01T00:00:00Z", "end": "2025-01-01T00:00:00Z"}})) == (
        "WINDOW_TOO_LARGE"
    )
