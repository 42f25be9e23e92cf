"""Keyset paging of the ledger aggregates over HTTP, hostile cursors, and the column-wise list
completion (service.api.leaf_lists) against graphql-core's own path.

The ledger: 4 hours × (GPU-a, GPU-b held by project p1 with team t1 / without a team, GPU-c held
by p2 and priced in EUR, GPU-d unallocated and GPU-e unpriced): NULL group values (project, team,
currency) sit before and after non-NULL ones at the same period, so both forms of the keyset
predicate (the row-value comparison and the expanded one with IS NULL) are crossed.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
from collections.abc import Iterator
from enum import Enum
from types import SimpleNamespace
from typing import Any

import pytest
import strawberry
from conftest import Gql, client, serve
from ledger_rows import at, row
from sqlalchemy import Engine

from service.api.context import ApiContext, ApiSettings
from service.api.graphql import build_schema, schema
from service.api.leaf_lists import LeafListExecutionContext
from service.auth.principal import PRINCIPAL_KEY, Principal

HOURS = 4
W = {"start": at(0).isoformat(), "end": at(HOURS).isoformat()}
W_DAYS = {"start": at(-24).isoformat(), "end": at(48).isoformat()}


def _ledger() -> list[Any]:
    rows = []
    for h in range(HOURS):
        rows += [
            row(
                h,
                "GPU-a",
                "job-a",
                project="p1",
                team="t1",
                cost="2",
                idle_cost="1",
                busy_s=1800.0,
                idle_s=900.0,
            ),
            row(h, "GPU-b", "job-b", project="p1", cost="3", idle_cost="0", busy_s=3600.0),
            row(h, "GPU-c", "job-c", project="p2", team="t2", currency="EUR", cost="5", idle_cost="2"),
            row(h, "GPU-d", cost="1", idle_cost="1", idle_s=3600.0, energy_j=7.2e6),
            row(
                h, "GPU-e", "job-e", project="p2", currency=None, cost=None, idle_cost=None, rate_source=None
            ),
        ]
    # A device observed for none of its hour: utilization and coverage are null.
    rows.append(row(2, "GPU-f", present_s=3600.0, observed_s=0.0, cost="1", idle_cost="0"))
    return rows


@pytest.fixture
def gql(engine: Engine, put) -> Iterator[Gql]:  # type: ignore[no-untyped-def]
    put(_ledger())
    limits = {"rate_per_minute": 0}  # these tests send hundreds of pages
    for base in serve(engine, aggregate_page_size_max=50, max_result_rows=1000, limits=limits):
        yield client(base)


#: (field, arguments, selection): every paged field, groupings with NULL values, several periods.
CASES = [
    ("usage", "granularity: HOUR, groupBy: [DEVICE]", "periodStart device gpuHours utilizationPct"),
    ("usage", "granularity: HOUR, groupBy: [PROJECT, TEAM]", "periodStart project team gpuHours"),
    ("usage", "granularity: DAY, groupBy: [TEAM, DEVICE], window: $d", "periodStart team device gpuHours"),
    ("usage", "granularity: WEEK, groupBy: [PROJECT], window: $d", "periodStart project gpuHours"),
    ("usage", "groupBy: [TEAM, PROJECT]", "team project gpuHours energyKwh coverage: coveragePct"),
    ("usage", "", "gpuHours"),
    (
        "idleWaste",
        "granularity: HOUR, groupBy: [PROJECT]",
        "periodStart project idleGpuHours idleCost { amount currency }",
    ),
    (
        "effectiveCost",
        "groupBy: [PROJECT, DEVICE]",
        "project device cost { amount currency } costPerGpuHour { amount }",
    ),
    (
        "cost",
        "granularity: HOUR, groupBy: [PROJECT, TEAM]",
        "periodStart project team unallocated cost { amount currency }",
    ),
    (
        "cost",
        "granularity: HOUR, groupBy: [PROJECT], idlePolicy: SHARE_EVENLY",
        "periodStart project cost { amount currency }",
    ),
]


def _query(field: str, args: str) -> str:
    window, name = ("", "d") if "window: $d" in args else ("window: $w, ", "w")
    return (
        f"query(${name}: TimeWindow!, $n: Int, $a: String) {{ "
        f"{field}({window}{args}{', ' if args else ''}first: $n, after: $a) {{ cursor SELECTION }} }}"
    )


def _run(gql: Gql, field: str, args: str, selection: str, **variables: Any) -> dict[str, Any]:
    query = _query(field, args).replace("SELECTION", selection)
    window = {"d": W_DAYS} if "window: $d" in args else {"w": W}
    return gql(query, {**window, **variables})


def _rows(gql: Gql, field: str, args: str, selection: str, **variables: Any) -> list[dict[str, Any]]:
    body = _run(gql, field, args, selection, **variables)
    assert "errors" not in body, body
    rows: list[dict[str, Any]] = body["data"][field]
    return rows


@pytest.mark.parametrize(("field", "args", "selection"), CASES)
def test_pages_are_exactly_the_unpaged_answer(
    engine: Engine,
    put,  # type: ignore[no-untyped-def]
    field: str,
    args: str,
    selection: str,
) -> None:
    # In process (the schema and resolvers the app serves, without HTTP): hundreds of pages.
    put(_ledger())
    settings = ApiSettings(aggregate_page_size_max=50, max_result_rows=1000)

    async def rows(**variables: Any) -> list[dict[str, Any]]:
        query = _query(field, args).replace("SELECTION", selection)
        window = {"d": W_DAYS} if "window: $d" in args else {"w": W}
        body = await _aexecute(engine, True, query, {**window, **variables}, settings)
        assert "errors" not in body, body
        out: list[dict[str, Any]] = body["data"][field]
        return out

    async def check() -> None:  # one event loop for every page
        whole = await rows()
        assert len(whole) >= 1 and len({r["cursor"] for r in whole}) == len(whole)
        for first in (1, 3, 50):
            got: list[dict[str, Any]] = []
            after = None
            while True:
                page = await rows(n=first, a=after)
                got += page
                if len(page) < first:
                    break
                after = page[-1]["cursor"]
            assert got == whole, (first, got, whole)
        # After the last row: nothing, not an error.
        assert await rows(n=5, a=whole[-1]["cursor"]) == []

    asyncio.run(check())


def test_the_hand_built_answer(gql: Gql) -> None:
    # The order and values pinned once: NULL teams first within a project, unallocated (NULL
    # project) first within an hour, per hour.
    rows = _rows(
        gql, "usage", "granularity: HOUR, groupBy: [PROJECT, TEAM]", "periodStart project team gpuHours"
    )
    first_hour = [(r["project"], r["team"], r["gpuHours"]) for r in rows if r["periodStart"] == W["start"]]
    assert first_hour == [
        (None, None, 1.0),
        ("p1", None, 1.0),
        ("p1", "t1", 1.0),
        ("p2", None, 1.0),
        ("p2", "t2", 1.0),
    ]
    assert len(rows) == 5 * HOURS
    # Two pages of 3 end inside the first hour and continue after (p1, NULL) exactly.
    page = _rows(gql, "usage", "granularity: HOUR, groupBy: [PROJECT, TEAM]", "project team", n=2)
    assert [(r["project"], r["team"]) for r in page] == [(None, None), ("p1", None)]
    nxt = _rows(
        gql, "usage", "granularity: HOUR, groupBy: [PROJECT, TEAM]", "project team", n=2, a=page[-1]["cursor"]
    )
    assert [(r["project"], r["team"]) for r in nxt] == [("p1", "t1"), ("p2", None)]


def _error(body: dict[str, Any]) -> tuple[str, str]:
    assert body["data"] is None, body
    [error] = body["errors"]
    return error["extensions"]["code"], error["message"]


def test_a_cursor_of_another_query_is_refused(gql: Gql) -> None:
    base = ("usage", "granularity: HOUR, groupBy: [DEVICE]", "device")
    cursor = _rows(gql, *base, n=1)[0]["cursor"]
    others = [
        ("usage", "granularity: DAY, groupBy: [DEVICE]", "device", {}),
        ("usage", "granularity: HOUR, groupBy: [PROJECT]", "project", {}),
        ("usage", "granularity: HOUR, groupBy: [DEVICE], metric: GPU_UTIL", "device", {}),
        ("usage", 'granularity: HOUR, groupBy: [DEVICE], filter: {project: ["p1"]}', "device", {}),
        ("usage", "granularity: HOUR, groupBy: [DEVICE]", "device", {"w": {**W, "end": at(3).isoformat()}}),
        ("idleWaste", "granularity: HOUR, groupBy: [DEVICE]", "device", {}),
        ("cost", "granularity: HOUR, groupBy: [DEVICE]", "device", {}),
        ("cost", "granularity: HOUR, groupBy: [DEVICE], idlePolicy: SHARE_BY_USAGE", "device", {}),
    ]
    for field, args, selection, variables in others:
        body = _run(gql, field, args, selection, n=1, a=cursor, **variables)
        assert _error(body) == ("INVALID_ARGUMENT", f"cursor {cursor!r} is not one {field} handed out"), args
    # The same query (first aside, the window written in another offset) accepts it.
    same = {"start": at(0).astimezone(_plus_two()).isoformat(), "end": W["end"]}
    assert len(_rows(gql, *base, n=3, a=cursor, w=same)) == 3


def _plus_two() -> Any:
    import datetime as dt

    return dt.timezone(dt.timedelta(hours=2))


def _tampered(cursor: str, *key: Any) -> str:
    binding = json.loads(base64.urlsafe_b64decode(cursor))[0]
    return base64.urlsafe_b64encode(json.dumps([binding, *key]).encode()).decode()


def test_hostile_cursors_are_refused_never_a_500(gql: Gql) -> None:
    base = ("usage", "granularity: HOUR, groupBy: [PROJECT, TEAM]", "project team")
    cursor = _rows(gql, *base, n=1)[0]["cursor"]
    hour = json.loads(base64.urlsafe_b64decode(cursor))[1]
    hostile = [
        "",
        "x",
        "%%%%",
        "A" * 9000,
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        base64.urlsafe_b64encode(b'{"a": 1}').decode(),
        base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode(),
        _tampered(cursor, "not an hour", "p1", None),
        _tampered(cursor, hour, 5, None),
        _tampered(cursor, hour, "p1"),
        _tampered(cursor, hour, "p1", None, "extra"),
        _tampered(cursor, True, "p1", None),
        _tampered(cursor, 2**70, "p1", None),
        _tampered(cursor, -(2**62), "p1", None),  # beyond the INTEGER column: no database error
        _tampered(cursor, 1.5, "p1", None),
        _tampered(cursor, hour, ["p1"], None),
        _tampered(cursor, hour, {"p": 1}, None),
        _tampered(cursor, hour, "p\u0000", None),
        _tampered(cursor, hour, "\ud800", None),
    ]
    for bad in hostile:
        body = _run(gql, *base, n=2, a=bad)
        code, message = _error(body)
        assert code == "INVALID_ARGUMENT", (bad[:80], body)
        assert message.startswith("cursor ") and message.endswith(" is not one usage handed out")
    # A well-formed key nobody handed out is only a position: the rows after it, in scope.
    forged = _tampered(cursor, hour, "p1", "zzz")
    assert [(r["project"], r["team"]) for r in _rows(gql, *base, n=2, a=forged)] == [
        ("p2", None),
        ("p2", "t2"),
    ]
    forged = _tampered(cursor, hour, None, None)  # after the first row's own key: all but it
    assert _rows(gql, *base, n=50, a=forged) == _rows(gql, *base, n=50)[1:]
    forged = _tampered(cursor, -(2**31 - 1), None, None)
    assert len(_rows(gql, *base, n=50, a=forged)) == 5 * HOURS


def test_aggregate_page_size_has_its_own_cap(gql: Gql) -> None:
    body = _run(gql, "usage", "granularity: HOUR, groupBy: [DEVICE]", "device", n=51)
    assert _error(body) == ("PAGE_SIZE_TOO_LARGE", "first=51 is above the page size limit of 50")
    assert len(_rows(gql, "usage", "granularity: HOUR, groupBy: [DEVICE]", "device", n=50)) == 5 * HOURS + 1


# --- the column-wise completion equals graphql-core's ----------------------------------------------


@functools.cache
def _schema(leaf_lists: bool) -> Any:
    return schema if leaf_lists else build_schema(leaf_lists=False)


def _execute(engine: Engine, leaf_lists: bool, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    return asyncio.run(_aexecute(engine, leaf_lists, query, variables))


async def _aexecute(
    engine: Engine,
    leaf_lists: bool,
    query: str,
    variables: dict[str, Any],
    settings: ApiSettings | None = None,
) -> dict[str, Any]:
    principal = Principal.of("admin", "token", ["admin"])
    request = SimpleNamespace(scope={PRINCIPAL_KEY: principal})
    context = ApiContext(engine, settings or ApiSettings(), request)
    result = await _schema(leaf_lists).execute(query, variables, context_value=context)
    out: dict[str, Any] = {"data": result.data}
    if result.errors:
        out["errors"] = [(e.message, e.path) for e in result.errors]
    return json.loads(json.dumps(out))


FAST_QUERIES = [
    # aliases, a named fragment, an inline fragment, __typename, nulls, DateTime, the cursor
    """query($w: TimeWindow!) { usage(window: $w, granularity: HOUR, groupBy: [DEVICE, PROJECT]) {
        ...f  t: __typename  when: periodStart  ... on UsageRow { u: utilizationPct coveragePct }
        device energyKwh cursor gpuHours g2: gpuHours } }
      fragment f on LedgerBucket { project team __typename }""",
    # a field twice under one key (merged), directives, an interface fragment
    """query($w: TimeWindow!, $yes: Boolean = true) { usage(window: $w, groupBy: [DEVICE]) {
        device device @include(if: $yes) team @skip(if: $yes) idleGpuHours @include(if: false)
        ... on LedgerBucket { periodStart } metric } }""",
    # nested objects (Money): the normal path, same answer
    """query($w: TimeWindow!) { cost(window: $w, granularity: HOUR, groupBy: [PROJECT]) {
        project cost { amount currency } gpuHours unallocated rateSource } }""",
    """query($w: TimeWindow!) { idleWaste(window: $w, groupBy: [DEVICE]) {
        device idleGpuHours thresholdPct } }""",
    """query($w: TimeWindow!) { a: effectiveCost(window: $w, groupBy: [DEVICE]) { device gpuHours }
        b: usage(window: $w, groupBy: [PROJECT], first: 2) { project cursor } }""",
]


@pytest.mark.parametrize("query", FAST_QUERIES)
def test_fast_completion_answers_as_graphql_core(engine: Engine, put, query: str) -> None:  # type: ignore[no-untyped-def]
    put(_ledger())
    fast = _execute(engine, True, query, {"w": W})
    slow = _execute(engine, False, query, {"w": W})
    assert "errors" not in slow, slow
    assert fast == slow
    rows = next(iter(slow["data"].values()))
    assert len(rows) > 1


@strawberry.enum
class Colour(Enum):
    RED = "red"
    BLUE = "blue"


@strawberry.type
class Item:
    name: str
    colour: Colour
    size: float | None
    weight: float
    tags: list[str]

    @strawberry.field
    def shout(self) -> str:
        return self.name.upper()


def _items(weight_of_second: Any = 2.0, colour_of_second: Any = Colour.BLUE) -> list[Item]:
    return [
        Item(name="a", colour=Colour.RED, size=None, weight=1.0, tags=["x"]),
        Item(name="b", colour=colour_of_second, size=1.5, weight=weight_of_second, tags=[]),
        Item(name="c", colour=Colour.RED, size=2.0, weight=3.0, tags=["y", "z"]),
    ]


@strawberry.type
class ItemQuery:
    @strawberry.field
    def items(self, case: str = "ok") -> list[Item]:
        if case == "null":  # a null where the type forbids one: an error at that path
            return _items(weight_of_second=None)
        if case == "bad":  # a value Float cannot serialize: an error at that path
            return _items(weight_of_second="heavy")
        if case == "enum":  # not a member: an error
            return _items(colour_of_second="purple")
        return _items()

    @strawberry.field
    def maybe(self) -> list[Item | None]:
        return [*_items()[:2], None]


ITEM_QUERIES = [
    "{ items { name colour size weight __typename n: name } }",
    "{ items { name shout } }",  # a resolver: the normal path
    "{ items { name tags } }",  # a list field: the normal path
    '{ items(case: "null") { name weight } }',
    '{ items(case: "bad") { name weight } }',
    '{ items(case: "enum") { name colour } }',
    "{ maybe { name size } }",
    "{ items { ... on Item { name } colour } }",
]


@pytest.mark.parametrize("query", ITEM_QUERIES)
def test_fast_completion_keeps_values_nulls_and_errors(query: str) -> None:
    fast = strawberry.Schema(query=ItemQuery, execution_context_class=LeafListExecutionContext)
    slow = strawberry.Schema(query=ItemQuery)
    a, b = fast.execute_sync(query), slow.execute_sync(query)
    assert a.data == b.data
    assert [(e.message, e.path) for e in a.errors or []] == [(e.message, e.path) for e in b.errors or []]


def test_fast_completion_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The column-wise path really runs where it may (else the tests above compare the slow path
    with itself), and not where it may not."""
    taken: list[bool] = []
    original = LeafListExecutionContext._complete

    def spy(plan: Any, items: list[Any], info: Any) -> Any:
        out = original(plan, items, info)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(LeafListExecutionContext, "_complete", staticmethod(spy))
    schema = strawberry.Schema(query=ItemQuery, execution_context_class=LeafListExecutionContext)
    assert schema.execute_sync("{ items { name colour size } }").data == {
        "items": [
            {"name": "a", "colour": "RED", "size": None},
            {"name": "b", "colour": "BLUE", "size": 1.5},
            {"name": "c", "colour": "RED", "size": 2.0},
        ]
    }
    assert taken == [True]
    schema.execute_sync('{ items(case: "null") { name weight } }')
    assert taken == [True, False]  # refused the list: the normal path made the error
    schema.execute_sync("{ items { shout } }")
    assert taken == [True, False]  # never tried: a resolver
