"""first/after paging of the aggregate root fields and the max_result_rows cap, over HTTP."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Gql, client, serve
from ledger_rows import at, row
from sqlalchemy import Engine

W = {"start": at(0).isoformat(), "end": at(2).isoformat()}
#: Field → (extra arguments, selection): 2 hours (or devices) × (pool, p0, p1, p2) = 8 rows each.
FIELDS = {
    "usage": ("granularity: HOUR, groupBy: [PROJECT]", "periodStart project gpuHours"),
    "idleWaste": ("granularity: HOUR, groupBy: [PROJECT]", "periodStart project idleGpuHours"),
    "effectiveCost": ("groupBy: [PROJECT, DEVICE]", "project device gpuHours"),
    "cost": ("granularity: HOUR, groupBy: [PROJECT]", "periodStart project cost { amount }"),
}


@pytest.fixture
def capped(engine: Engine, put) -> Iterator[Gql]:  # type: ignore[no-untyped-def]
    put(
        [
            row(h, f"GPU-{p}-{h}", f"job-{p}", project=f"p{p}", cost="1", idle_cost="0")
            for h in range(2)
            for p in range(3)
        ]
        + [row(h, f"GPU-free-{h}", cost="1", idle_cost="1") for h in range(2)]
    )
    for base in serve(engine, page_size_max=5, aggregate_page_size_max=5, max_result_rows=7):
        yield client(base)


def _query(field: str) -> str:
    args, selection = FIELDS[field]
    return f"""query($w: TimeWindow!, $n: Int, $a: String) {{
      {field}(window: $w, {args}, first: $n, after: $a) {{ cursor {selection} }} }}"""


def _error(body: dict[str, Any]) -> tuple[str, str]:
    assert body["data"] is None, body
    [error] = body["errors"]
    return error["extensions"]["code"], error["message"]


@pytest.mark.parametrize("field", list(FIELDS))
def test_aggregates_page_with_first_and_after_and_refuse_above_the_cap(capped: Gql, field: str) -> None:
    query = _query(field)
    code, message = _error(capped(query, {"w": W}))
    assert code == "RESULT_TOO_LARGE"
    assert message.startswith(f"{field} would return more than 7 rows (max_result_rows); page through it ")
    assert "`first`" in message and "`after`" in message

    got: list[dict[str, Any]] = []
    after = None
    while True:
        rows = capped(query, {"w": W, "n": 3, "a": after})["data"][field]
        got += rows
        if len(rows) < 3:
            break
        after = rows[-1]["cursor"]
    assert len(got) == 8 and len({r["cursor"] for r in got}) == 8
    # the same rows as one answer (the cap allows 7 after the first row)
    rest = capped(query, {"w": W, "a": got[0]["cursor"]})["data"][field]
    assert rest == got[1:]

    assert _error(capped(query, {"w": W, "n": 6})) == (
        "PAGE_SIZE_TOO_LARGE",
        "first=6 is above the page size limit of 5",
    )
    assert _error(capped(query, {"w": W, "n": -1})) == (
        "INVALID_ARGUMENT",
        "first must not be negative (got -1)",
    )
    other = "devices" if field != "usage" else "cost"
    for bad in ("nope", base64.urlsafe_b64encode(f"{other}:1".encode()).decode()):
        assert _error(capped(query, {"w": W, "n": 2, "a": bad})) == (
            "INVALID_ARGUMENT",
            f"cursor {bad!r} is not one {field} handed out",
        )


def test_a_cursor_of_another_field_is_refused(capped: Gql) -> None:
    [first] = capped(_query("usage"), {"w": W, "n": 1})["data"]["usage"]
    code, message = _error(capped(_query("cost"), {"w": W, "n": 1, "a": first["cursor"]}))
    assert (code, message) == ("INVALID_ARGUMENT", f"cursor {first['cursor']!r} is not one cost handed out")


def test_reconciliation_pages_too(capped: Gql) -> None:
    query = """query($w: TimeWindow!, $n: Int, $a: String) {
      reconciliation(window: $w, first: $n, after: $a) { cursor account } }"""
    assert capped(query, {"w": W, "n": 2}) == {"data": {"reconciliation": []}}
    assert _error(capped(query, {"w": W, "n": 9}))[0] == "PAGE_SIZE_TOO_LARGE"
    assert _error(capped(query, {"w": W, "a": "x"}))[0] == "INVALID_ARGUMENT"
