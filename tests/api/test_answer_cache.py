"""The answer cache (service.api.answer_cache) through the real app over HTTP, and its store alone.

The ledger: project alpha (team ml) and project gamma (team web) on one device each, two hours.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from conftest import serve
from ledger_rows import at, row
from sqlalchemy import Engine

from service.analytics.access import ALL, Access
from service.api.answer_cache import (
    ENTRY_OVERHEAD_B,
    AnswerKey,
    AnswerStore,
    OperationKey,
    VersionReader,
)
from service.auth.tokens import TokenStore
from service.ledger import version

W = {"start": at(0).isoformat(), "end": at(2).isoformat()}
COST = """query Dash($w: TimeWindow!) {
  cost(window: $w, groupBy: [PROJECT]) { project cost { amount currency } }
  usage(window: $w, groupBy: [DEVICE]) { device gpuHours }
}"""


@pytest.fixture
def ledger(put) -> None:  # type: ignore[no-untyped-def]
    put(
        [
            *(row(h, "GPU-a", "job-a", project="alpha", team="ml", cost="3") for h in range(2)),
            *(row(h, "GPU-g", "job-g", project="gamma", team="web", cost="2") for h in range(2)),
        ]
    )


class Caller:
    def __init__(self, base: str, secret: str | None = None) -> None:
        self.base = base
        self.headers = {"Authorization": f"Bearer {secret}"} if secret else {}

    def post(self, body: Any, **kw: Any) -> httpx.Response:
        r = httpx.post(f"{self.base}/graphql", json=body, headers=self.headers, timeout=30, **kw)
        assert "Traceback" not in r.text
        return r

    def dash(self, query: str = COST, **body: Any) -> httpx.Response:
        return self.post({"query": query, "variables": {"w": W}, **body})


def _metric(base: str, name: str, secret: str | None = None) -> float:
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    text = httpx.get(f"{base}/metrics", headers=headers, timeout=10).text
    for line in text.splitlines():
        if line.startswith(f"{name} ") or line.startswith(f"{name}{{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not on /metrics")


@pytest.fixture
def callers(engine: Engine, ledger: None) -> Iterator[tuple[str, dict[str, Caller]]]:
    tokens = TokenStore(engine)
    scopes = {"admin": "admin", "reader": "read", "alpha": "read:project:alpha", "web": "read:team:web"}
    secrets = {n: tokens.create(f"cache-{n}", [s])[0] for n, s in scopes.items()}
    for base in serve(engine, auth={}):
        yield base, {n: Caller(base, s) for n, s in secrets.items()}


def _projects(r: httpx.Response) -> list[tuple[str, str]]:
    assert r.status_code == 200, r.text
    body = r.json()
    assert "errors" not in body, body
    return [
        (c["project"], f"{Decimal(c['cost']['amount']):f}".rstrip("0").rstrip("."))
        for c in body["data"]["cost"]
    ]


def test_a_hit_is_the_same_body_and_skips_execution(callers: tuple[str, dict[str, Caller]]) -> None:
    base, c = callers
    first = c["admin"].dash()
    assert first.headers["x-answer-cache"] == "miss"
    assert _projects(first) == [("alpha", "6"), ("gamma", "4")]
    second = c["admin"].dash()
    assert second.headers["x-answer-cache"] == "hit"
    assert second.content == first.content
    assert second.headers["content-type"] == first.headers["content-type"] == "application/json"
    # whitespace, commas and comments are not part of the key; the operation is
    reformatted = "# the dashboard\n" + " ".join(COST.split()).replace("project cost", "project,cost")
    assert c["admin"].dash(reformatted).headers["x-answer-cache"] == "hit"
    assert c["admin"].dash(COST, operationName="Dash").headers["x-answer-cache"] == "miss"
    assert _metric(base, "gpu_ledger_answer_cache_hits_total", c["admin"].headers["Authorization"][7:]) == 2
    assert _metric(base, "gpu_ledger_answer_cache_misses_total", c["admin"].headers["Authorization"][7:]) == 2


def test_scopes_never_share_answers(callers: tuple[str, dict[str, Caller]]) -> None:
    """The admin's answer is cached first; every narrower caller asks the very same request and
    gets its own rows — then everyone again, from the cache, still their own."""
    _base, c = callers
    expected = {
        "admin": [("alpha", "6"), ("gamma", "4")],
        "reader": [("alpha", "6"), ("gamma", "4")],
        "alpha": [("alpha", "6")],
        "web": [("gamma", "4")],
    }
    for name in ("admin", "alpha", "web", "reader"):
        assert _projects(c[name].dash()) == expected[name], name
    for name in ("web", "alpha", "reader", "admin"):
        r = c[name].dash()
        assert r.headers["x-answer-cache"] == "hit"
        assert _projects(r) == expected[name], name
    # admin and read see the same rows: same Access, one shared entry (the key is the scope, not
    # the token) — the reader's first request above was already a hit.


def test_an_account_wide_refusal_is_not_cached_and_a_revoked_token_is_refused(
    engine: Engine, callers: tuple[str, dict[str, Caller]]
) -> None:
    _base, c = callers
    query = "{ connectors { name status } }"
    assert c["admin"].post({"query": query}).json() == {"data": {"connectors": []}}
    for _ in range(2):  # FORBIDDEN for a project token, every time: never the admin's cached []
        r = c["alpha"].post({"query": query})
        assert r.headers["x-answer-cache"] == "miss"
        assert r.json()["errors"][0]["extensions"]["code"] == "FORBIDDEN"
    assert _projects(c["alpha"].dash()) == [("alpha", "6")]
    TokenStore(engine).revoke("cache-alpha")
    assert c["alpha"].dash().status_code == 401  # authentication comes before the cache


def test_a_bump_invalidates_and_new_rows_are_seen(
    engine: Engine, put: Any, callers: tuple[str, dict[str, Caller]]
) -> None:
    _base, c = callers
    assert _projects(c["admin"].dash()) == [("alpha", "6"), ("gamma", "4")]
    put([row(0, "GPU-b", "job-b", project="beta", team="ml", cost="7")])  # bumps, as ingest does
    r = c["admin"].dash()
    assert r.headers["x-answer-cache"] == "miss"
    assert _projects(r) == [("alpha", "6"), ("beta", "7"), ("gamma", "4")]
    assert c["admin"].dash().headers["x-answer-cache"] == "hit"
    with engine.begin() as conn:  # any committed bump, whatever it wrote
        version.bump(conn)
    assert c["admin"].dash().headers["x-answer-cache"] == "miss"


def test_errors_are_never_cached(callers: tuple[str, dict[str, Caller]]) -> None:
    _base, c = callers
    bad_window = {"start": at(2).isoformat(), "end": at(0).isoformat()}
    for _ in range(2):
        r = c["admin"].post({"query": COST, "variables": {"w": bad_window}})
        assert r.headers["x-answer-cache"] == "miss"
        assert r.json()["errors"]
    for _ in range(2):  # a syntax error: not even keyed
        r = c["admin"].post({"query": "{ cost(", "variables": {}})
        assert r.headers["x-answer-cache"] == "bypass"
        assert r.json()["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    for _ in range(2):  # valid syntax, unknown field: validation error, not cached
        r = c["admin"].post({"query": "{ nope }"})
        assert r.headers["x-answer-cache"] == "miss" and r.json()["errors"]
    batch = [{"query": COST, "variables": {"w": W}}] * 2
    for _ in range(2):  # batching is off: refused by strawberry, the cache never keys it
        r = c["admin"].post(batch)
        assert (r.status_code, r.json()["errors"][0]["message"]) == (400, "Batching is not enabled")


HOSTILE = [
    json.dumps({"query": COST, "variables": {"w": W}, "operationName": 7}),
    json.dumps({"query": COST, "variables": [1]}),
    json.dumps({"query": 5}),
    json.dumps({"query": "{" * 5000 + "}" * 5000}),
    json.dumps({"query": '{ cost(window: {start: "\\u0000"}) { project } }'}),
    '{"query": "{ __typename }", "variables": {"w": {"start": "x", "end": 1e400}}}',
    '{"query": "{ __typename }", "extensions": {"a": [1, {"b": null}]}}',
    '{"query": "{ __typename }", "variables": ' + "[" * 100_000 + "]" * 100_000 + "}",
    '{"query": "{ __typename }" "oops"',
    "\udcff",
]


@pytest.mark.parametrize("body", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_requests_are_answered_never_500(callers: tuple[str, dict[str, Caller]], body: str) -> None:
    _base, c = callers
    answers = []
    for _ in range(2):
        r = httpx.post(
            f"{c['admin'].base}/graphql",
            content=body.encode("utf-8", "surrogateescape"),
            headers={**c["admin"].headers, "content-type": "application/json"},
            timeout=30,
        )
        assert r.status_code in (200, 400), r.text
        assert "Traceback" not in r.text
        assert r.headers["content-type"].startswith("application/json")
        answers.append(r)
    first, second = answers
    if second.headers.get("x-answer-cache") == "hit":  # only a clean answer, and the same one
        assert first.status_code == 200 and "errors" not in first.json()
        assert second.content == first.content


def test_variables_are_part_of_the_key(callers: tuple[str, dict[str, Caller]]) -> None:
    _base, c = callers
    assert _projects(c["admin"].dash()) == [("alpha", "6"), ("gamma", "4")]
    one_hour = {"start": at(0).isoformat(), "end": at(1).isoformat()}
    r = c["admin"].post({"query": COST, "variables": {"w": one_hour}})
    assert r.headers["x-answer-cache"] == "miss"
    assert _projects(r) == [("alpha", "3"), ("gamma", "2")]


def test_disabled_cache_answers_the_same(engine: Engine, ledger: None) -> None:
    for base in serve(engine, answer_cache={"max_b": 0}):
        caller = Caller(base)
        for _ in range(2):
            r = caller.dash()
            assert "x-answer-cache" not in r.headers
            assert _projects(r) == [("alpha", "6"), ("gamma", "4")]


def test_an_answer_over_the_entry_cap_is_computed_every_time(engine: Engine, ledger: None) -> None:
    for base in serve(engine, answer_cache={"entry_max_b": 400}):
        caller = Caller(base)
        for _ in range(2):
            r = caller.dash()
            assert r.headers["x-answer-cache"] == "miss"
            assert _projects(r) == [("alpha", "6"), ("gamma", "4")]
        small = caller.post({"query": "{ __typename }"})  # 31 bytes + its key: 307 in all
        assert small.json() == {"data": {"__typename": "Query"}}
        assert caller.post({"query": "{ __typename }"}).headers["x-answer-cache"] == "hit"
        assert _metric(base, "gpu_ledger_answer_cache_too_large_total") == 2


# --- the store and the version reader alone ---------------------------------------------------


def _key(n: int, access: Access = ALL, v: int = 1) -> AnswerKey:
    return AnswerKey(OperationKey(f"q{n}", None, "{}", "{}"), access, v)


def test_store_is_bounded_in_bytes_least_recently_used_first() -> None:
    body = b"x" * 100
    cost = AnswerStore.cost_b(_key(0), body)
    assert cost == 100 + 2 + 2 + 2 + ENTRY_OVERHEAD_B
    store = AnswerStore(max_b=3 * cost, entry_max_b=10 * cost)
    for n in range(3):
        assert store.put(_key(n), body)
    assert store.size_b == 3 * cost and len(store) == 3
    assert store.get(_key(0)) == body  # 0 is now the most recently used
    assert store.put(_key(3), body)
    assert store.get(_key(1)) is None and store.evictions == 1
    assert [store.get(_key(n)) for n in (0, 2, 3)] == [body] * 3
    assert store.size_b == 3 * cost
    assert not store.put(_key(9), b"y" * (3 * cost))  # larger than the whole cache
    assert store.too_large == 1 and store.size_b == 3 * cost
    assert store.get(_key(0, Access(projects=frozenset({"alpha"})))) is None  # another scope


def test_store_drops_older_versions_when_a_newer_one_is_seen() -> None:
    store = AnswerStore(max_b=10_000, entry_max_b=10_000)
    store.saw_version(1)
    assert store.put(_key(0, v=1), b"old")
    store.saw_version(2)
    assert len(store) == 0 and store.size_b == 0 and store.evictions == 1
    assert not store.put(_key(0, v=1), b"late")  # computed under 1, finished after 2 was seen
    store.saw_version(1)  # an older reading changes nothing
    assert store.version == 2


def test_version_reads_are_coalesced_and_never_older_than_the_request() -> None:
    """Ten requests arriving during one read wait for the next read (which starts after they
    arrived) and share it: two reads for eleven requests."""

    async def scenario() -> tuple[list[int], int]:
        gate = asyncio.Event()
        value = 0

        async def read() -> int:
            seen = value  # the SELECT sees what is committed when it runs…
            await gate.wait()  # …and answers later
            return seen

        reader = VersionReader(read)
        first = asyncio.ensure_future(reader.current())
        await asyncio.sleep(0.05)  # the first read is in flight, blocked
        value = 1  # a commit lands: requests arriving from now on must see 1
        later = [asyncio.ensure_future(reader.current()) for _ in range(10)]
        await asyncio.sleep(0.05)
        gate.set()
        results = [await first, *[await f for f in later]]
        return results, reader.reads

    results, reads = asyncio.run(scenario())
    assert results == [0] + [1] * 10
    assert reads == 2


def test_a_failing_version_read_reaches_every_waiter() -> None:
    async def scenario() -> list[str]:
        async def read() -> int:
            raise RuntimeError("database gone")

        reader = VersionReader(read)
        outcomes = await asyncio.gather(*(reader.current() for _ in range(3)), return_exceptions=True)
        return [str(o) for o in outcomes]

    assert asyncio.run(scenario()) == ["database gone"] * 3


# --- the writers bump the version -------------------------------------------------------------


def _version(engine: Engine) -> int:
    with engine.connect() as conn:
        return version.current(conn)


def test_an_ingest_bumps_once_per_committed_day_and_per_run_state(engine: Engine) -> None:
    from connectors.registry import default_registry
    from service.ledger.ingest import ingest_window

    registry = default_registry()
    connector = registry.build(registry.validate({"name": "s", "type": "synthetic"}))
    before = _version(engine)
    start = dt.datetime(2025, 9, 1, 22, tzinfo=dt.UTC)
    result = ingest_window(engine, "s", connector, start, start + dt.timedelta(hours=4))
    assert result.ledger_rows > 0
    # the run begins (RUNNING), two UTC days commit (22-24 h, 0-2 h), the run ends
    assert _version(engine) == before + 4


def test_pruning_hours_bumps(engine: Engine) -> None:
    from service.ledger.retention import prune

    before = _version(engine)
    with engine.begin() as conn:
        prune(conn, dt.datetime(2025, 1, 1, tzinfo=dt.UTC), now=dt.datetime(2025, 6, 1, tzinfo=dt.UTC))
    assert _version(engine) == before + 1
    with engine.connect() as conn, conn.begin():  # rolled back with its transaction: no bump
        prune(conn, dt.datetime(2025, 2, 1, tzinfo=dt.UTC), now=dt.datetime(2025, 6, 1, tzinfo=dt.UTC))
        conn.rollback()
    assert _version(engine) == before + 1
