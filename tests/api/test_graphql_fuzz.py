"""Schema-driven fuzzing of ``POST /graphql`` (hypothesis-graphql): documents built from the real
schema, valid ones (POSITIVE) and broken ones (NEGATIVE), against the real app in-process, over a
SQLite ledger with rows in it. No answer may be a 5xx, carry ``internal error`` or a traceback,
and nothing may be logged at ERROR.

``FUZZ_CASES`` (150) documents per run, ~20–40 s on a 2-core machine.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from graphql import StringValueNode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_graphql import Mode, queries
from ledger_rows import D0, row
from sqlalchemy import Engine

from service.api.graphql import schema
from service.app import create_app
from service.db import make_engine
from service.settings import Settings

FUZZ_CASES = 150

#: Inside and around the fixture ledger's week, whole hours or not, sometimes not a date at all.
_instants = st.integers(min_value=-48, max_value=24 * 9).map(lambda h: D0 + dt.timedelta(hours=h))
_good_datetimes = _instants.map(lambda t: t.isoformat())
_bad_datetimes = st.one_of(
    _instants.map(lambda t: (t + dt.timedelta(minutes=17)).isoformat()),
    _instants.map(lambda t: t.replace(tzinfo=None).isoformat()),
    st.sampled_from(["", "yesterday", "9999-12-31T23:00:00Z", "0001-01-01T00:00:00Z"]),
)
# Mostly whole UTC hours, so that a fair share of windows is valid and the resolvers run.
_datetimes = (
    st.integers(0, 9)
    .flatmap(lambda k: _good_datetimes if k < 8 else _bad_datetimes)
    .map(lambda text: StringValueNode(value=text))
)
_dates = st.one_of(
    st.dates(min_value=dt.date(2024, 12, 1), max_value=dt.date(2025, 2, 1)).map(dt.date.isoformat),
    st.sampled_from(["", "2025-02-30", "not a date"]),
).map(lambda text: StringValueNode(value=text))
SCALARS = {"DateTime": _datetimes, "Date": _dates}
DOCUMENTS = st.one_of(
    queries(schema.as_str(), custom_scalars=SCALARS, mode=Mode.POSITIVE),
    queries(schema.as_str(), custom_scalars=SCALARS, mode=Mode.NEGATIVE),
)


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def fuzz_app(tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Any) -> Iterator[Any]:
    import shutil

    from sqlmodel import Session

    path = tmp_path_factory.mktemp("fuzz") / "ledger.db"
    shutil.copyfile(_sqlite_template, path)
    engine: Engine = make_engine(f"sqlite:///{path}")
    with Session(engine) as session:
        session.add_all([
            row(h, f"GPU-{h % 3}", f"job-{h % 4}", project=f"p{h % 2}", team="ml", busy_s=900.0 * (h % 4),
                obs_s_gpu_util=3600.0, busy_s_gpu_util=1800.0, cost="2.5", idle_cost="1")
            for h in range(48)
        ])  # fmt: skip
        session.commit()
    from ledger_rows import rebuild_days

    rebuild_days(engine)
    # No rate limit: one client sends every case as fast as it can.
    settings_ = Settings(
        database_url=f"sqlite:///{path}", auth={"anonymous_read": True}, limits={"rate_per_minute": 0}
    )
    yield create_app(settings_, engine)
    engine.dispose()


def _post(app: Any, query: str) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ledger") as c:
            return await c.post("/graphql", json={"query": query})

    return asyncio.run(go())


@pytest.mark.slow
def test_fuzz_graphql_from_the_schema(fuzz_app: Any) -> None:
    errors = _Errors()
    seen: list[tuple[int, str]] = []
    logging.getLogger().addHandler(errors)

    @settings(
        max_examples=FUZZ_CASES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(DOCUMENTS)
    def one(document: Any) -> None:
        query = document if isinstance(document, str) else str(document)
        r = _post(fuzz_app, query)
        assert r.status_code < 500, (query, r.text[:500])
        assert "internal error" not in r.text and "Traceback" not in r.text, (query, r.text[:500])
        assert not errors.records, (query, [rec.getMessage() for rec in errors.records])
        codes = [e.get("extensions", {}).get("code") for e in r.json().get("errors", [])]
        assert None not in codes, (query, r.text[:500])  # every error carries a code
        seen.append((r.status_code, ",".join(sorted(set(codes))) or "ok"))

    try:
        one()
    finally:
        logging.getLogger().removeHandler(errors)
    assert len(seen) >= FUZZ_CASES // 2  # hypothesis ran the cases (it may stop early only on a failure)
    outcomes: dict[str, int] = {}
    for status, codes in seen:
        outcomes[f"{status} {codes}"] = outcomes.get(f"{status} {codes}", 0) + 1
    print(f"\nfuzz: {len(seen)} documents; outcomes {dict(sorted(outcomes.items()))}")
