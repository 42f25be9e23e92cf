"""Paging of aggregate answers (first/after by order key, or by position where computed in Python)
and the cap on unpaged answers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from ledger_rows import at, row
from sqlalchemy import Engine

from service.analytics.access import ALL
from service.analytics.cost import cost
from service.analytics.dims import Dimension, Granularity, IdlePolicy
from service.analytics.effective import effective_cost
from service.analytics.errors import InvalidArgument, PageSizeTooLarge
from service.analytics.idle import idle_waste
from service.analytics.paging import Page, ResultTooLarge, decode_cursor, encode_cursor
from service.analytics.query import LedgerQuery
from service.analytics.usage import usage
from service.analytics.window import check_window
from service.billing.reconcile import reconcile

Q = LedgerQuery(check_window(at(0), at(3), max_days=400), Granularity.HOUR, (Dimension.PROJECT,), access=ALL)
#: 3 hours × (pool, p0, p1, p2, p3): 15 groups (12 under the SHARE policies, whose pool rows merge).
GROUPS = 15


@pytest.fixture
def ledger(put) -> None:  # type: ignore[no-untyped-def]
    put(
        [
            row(h, f"GPU-{p}", f"job-{p}", project=f"p{p}", cost="1", idle_cost="0")
            for h in range(3)
            for p in range(4)
        ]
        + [row(h, "GPU-free", cost="1", idle_cost="1") for h in range(3)]
    )


QUERIES: dict[str, Callable[..., list[Any]]] = {
    "usage": lambda conn, page: usage(conn, Q, page=page),
    "idleWaste": lambda conn, page: idle_waste(conn, Q, page=page),
    "effectiveCost": lambda conn, page: effective_cost(conn, Q, page=page),
    "cost": lambda conn, page: cost(conn, Q, page=page),
    "cost_evenly": lambda conn, page: cost(conn, Q, IdlePolicy.SHARE_EVENLY, page=page),
}


def pages(conn: Any, fn: Callable[..., list[Any]], first: int) -> list[Any]:
    """Every row, ``first`` at a time, each page continuing after the last row's cursor."""
    out: list[Any] = []
    after: str | None = None
    while True:
        page = Page.of("f", first, after, page_size_max=10, max_rows=5)
        rows = fn(conn, page)
        out += rows
        if len(rows) < first:
            return out
        [after] = page.key_cursors([rows[-1].key.order])


@pytest.mark.parametrize("name", list(QUERIES))
def test_pages_add_up_to_the_whole_answer_in_order(engine: Engine, ledger: None, name: str) -> None:
    fn = QUERIES[name]
    with engine.connect() as conn:
        whole = fn(conn, Page())
        assert len(whole) == (12 if name == "cost_evenly" else GROUPS)
        for first in (1, 4, 10):
            assert pages(conn, fn, first) == whole
        assert fn(conn, Page("f", first=0)) == []


@pytest.mark.parametrize("name", list(QUERIES))
def test_an_unpaged_answer_above_the_cap_is_refused(engine: Engine, ledger: None, name: str) -> None:
    fn = QUERIES[name]
    with engine.connect() as conn:
        assert len(fn(conn, Page("usage", max_rows=GROUPS))) in (12, GROUPS)
        with pytest.raises(ResultTooLarge) as err:
            fn(conn, Page("usage", max_rows=11))
    assert err.value.code == "RESULT_TOO_LARGE"
    assert err.value.message == (
        "usage would return more than 11 rows (max_result_rows); page through it with `first` (at most "
        "the page size limit) and `after` (the `cursor` of the last row received), or narrow the "
        "window, groupBy or filter"
    )


def test_reconciliation_pages_and_caps_its_rows(engine: Engine, ledger: None) -> None:
    # No cloud rows here: the answer is empty, any page of it too; the cap refuses nothing.
    with engine.connect() as conn:
        assert reconcile(conn, Q.window, access=ALL, page=Page("reconciliation", first=2, max_rows=0)) == []
        assert reconcile(conn, Q.window, access=ALL, page=Page("reconciliation", max_rows=0)) == []


def test_page_arguments_are_checked() -> None:
    assert Page.of("usage", None, encode_cursor("usage", (7,)), page_size_max=5, max_rows=9).offset == 8
    assert decode_cursor("cost", encode_cursor("cost", (0,))) == (0,)
    with pytest.raises(PageSizeTooLarge, match=r"^first=6 is above the page size limit of 5$"):
        Page.of("usage", 6, None, page_size_max=5, max_rows=9)
    with pytest.raises(InvalidArgument, match=r"^first must not be negative \(got -1\)$"):
        Page.of("usage", -1, None, page_size_max=5, max_rows=9)
    for bad in ("", "x", "!!!!", encode_cursor("cost", (3,)), encode_cursor("usage", (-1,)), "dXNhZ2U6MQ"):
        with pytest.raises(InvalidArgument) as err:
            Page.of("usage", 1, bad, page_size_max=5, max_rows=9).offset  # noqa: B018
        assert err.value.message == f"cursor {bad!r} is not one usage handed out"
