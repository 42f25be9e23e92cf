"""Cost per period and group, with an idle-cost policy and optional conversion to one currency.

SQL does the aggregation: one GROUP BY (period, [day,] dimensions, currency, allocated-or-not).
Python then works on those few buckets with ``Decimal``:

1. **FX** (``currency`` given): each (day, source currency) total is converted once, rounded
   half-even to 1e-9, and split back over that day's buckets with :func:`service.money.allocate`,
   so any grouping of the same window adds up to the same converted total.
2. **Idle policy**: the *pool* is the cost of unallocated time (``workload_key = ''``). It is
   shared within a *scope* = (period, currency, values of the non-workload dimensions grouped by):
   an on-prem pool never lands on AWS projects when ENVIRONMENT is grouped. ``SEPARATE`` keeps the
   pool as its own row(s) (workload dimensions null, ``unallocated`` true); ``SHARE_BY_USAGE``
   splits it over the scope's allocated rows in proportion to their cost, ``SHARE_EVENLY`` in
   equal parts; both with ``allocate`` so Σ rows equals the ungrouped total exactly (docs/design.md §4
   Conservation). A scope without allocated rows keeps its pool as an unallocated row.

Under the SHARE policies a row's ``idle_cost`` is its own idle cost plus its whole share of the
pool (unallocated time is idle or unattributed capacity); ``shared_idle_cost`` is that share alone.
GPU-hours are never redistributed: a row's ``gpu_hours`` is the time its own workloads held GPUs.

**Access.** A caller scoped to projects/teams (``q.access``) gets only its own rows. Under
``SEPARATE`` without conversion SQL reads only those rows (the pool, nobody's project, is not
shown). Under the SHARE policies, or when converting, the pool and the per-day conversion must be
the account's: the query then reads every row, grouped additionally by the PROJECT/TEAM the scope
names, shares and converts as for an unrestricted caller, keeps the rows the scope allows and folds
the added dimensions away. So a scoped caller's rows are exactly an unrestricted caller's rows for
its projects when it groups by them, and otherwise its own share of the pool: never another
project's row or share.

**Paging and order.** Under ``SEPARATE`` without conversion there is nothing to share or convert:
each SQL group is one answer row, so SQL orders the answer (period, dimensions NULL first, currency
with unpriced time as XXX, unallocated), pages it by keyset (a page starts after the last row's
key) and caps it (``max_result_rows + 1`` rows fetched). Otherwise the policy and FX work on the
whole answer in Python, rows are sorted there the same way (by code point), and a page is cut after
it by position (a row's cursor is its index): each page costs the whole answer's SQL and
Python work; without ``first`` the row cap is checked first by counting the answer's groups in SQL
(before pools are shared: an upper bound).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, Connection, case, func, select

from service.analytics.access import ALL
from service.analytics.dims import Dimension, IdlePolicy
from service.analytics.fx import NO_CURRENCY, FxTable, check_currency, convert_amounts
from service.analytics.paging import WHOLE, Page
from service.analytics.query import (
    GroupKey,
    LedgerQuery,
    collector_paused,
    fetch_columns,
    group_keys,
    grouped_select,
    key_columns,
)
from service.analytics.window import hours, money_sum, one_of
from service.money import allocate

ZERO = Decimal("0E-9")


@dataclass
class _Part:
    key: GroupKey
    currency: str
    unallocated: bool
    day: int | None
    cost: Decimal
    idle_cost: Decimal
    gpu_hours: float
    unpriced_gpu_hours: float
    rate_sources: frozenset[str]
    shared_idle_cost: Decimal = field(default=ZERO)


@dataclass(frozen=True)
class CostRow:
    """One bucket of :func:`cost`; amounts in ``currency`` (``XXX``: unpriced time, amount 0)."""

    key: GroupKey
    currency: str
    cost: Decimal
    idle_cost: Decimal
    shared_idle_cost: Decimal
    gpu_hours: float
    unpriced_gpu_hours: float
    rate_source: str | None
    unallocated: bool


def _unallocated(src: Any) -> ColumnElement[int]:
    return case((src.c.workload_key == "", 1), else_=0)


def _count_groups(conn: Connection, q: LedgerQuery) -> int:
    """Rows of the answer before pools are shared (an upper bound of the answer), counted in SQL."""
    src = q.source()
    extra = [src.c.currency.label("currency"), _unallocated(src).label("unallocated")]
    keys = key_columns(src, q, extra, free=src.c.workload_key == "")
    groups = select(*keys).group_by(*keys).subquery("groups")
    return int(conn.execute(select(func.count()).select_from(groups)).scalar_one())


def part_measures(q: LedgerQuery, by_day: bool) -> tuple[Any, list[Any], list[Any]]:
    """The source, extra keys and measures of cost's SQL groups (:func:`_sql_parts`, and the
    export's frame under SEPARATE without conversion)."""
    src = q.source()
    unalloc = _unallocated(src)
    # Unpriced time (currency NULL) groups as XXX, so SQL orders currencies as the answer names them.
    extra = [func.coalesce(src.c.currency, NO_CURRENCY).label("currency"), unalloc.label("unallocated")]
    if by_day:
        extra.append(src.c.day_index.label("day"))
    measures = [
        money_sum(src.c.cost).label("cost"),
        money_sum(src.c.idle_cost).label("idle_cost"),
        hours(src.c.present_s, src).label("gpu_hours"),
        hours(case((src.c.cost.is_(None), src.c.present_s), else_=0.0), src).label("unpriced_gpu_hours"),
        func.min(src.c.rate_source).label("rs_min"),
        func.max(src.c.rate_source).label("rs_max"),
    ]
    return src, extra, measures


@collector_paused
def _sql_parts(conn: Connection, q: LedgerQuery, by_day: bool, page: Page = WHOLE) -> list[_Part]:
    """One part per SQL group (per day too when ``by_day``), in the SQL order, ``page`` of them."""
    src, extra, measures = part_measures(q, by_day)
    stmt = grouped_select(src, q, measures, extra, free=src.c.workload_key == "", page=page)
    c = fetch_columns(conn, stmt, page)
    sources = [
        frozenset(s for s in (lo, hi) if s is not None)
        for lo, hi in zip(c["rs_min"], c["rs_max"], strict=True)
    ]
    return list(
        map(
            _Part,
            group_keys(q, c, ["currency", "unallocated"]),
            [cur or NO_CURRENCY for cur in c["currency"]],
            map(bool, c["unallocated"]),
            c["day"] if by_day else [None] * len(sources),
            c["cost"],
            c["idle_cost"],
            map(float, c["gpu_hours"]),
            map(float, c["unpriced_gpu_hours"]),
            sources,
        )
    )


def _convert(parts: list[_Part], fx: FxTable) -> list[_Part]:
    by_day: dict[tuple[int, str], list[_Part]] = defaultdict(list)
    for p in parts:
        by_day[(p.day or 0, p.currency)].append(p)
    out: list[_Part] = []
    for (day, currency), group in by_day.items():
        rate = fx.rate(currency, day)
        costs = convert_amounts([p.cost for p in group], rate)
        idles = convert_amounts([p.idle_cost for p in group], rate)
        for p, c, i in zip(group, costs, idles, strict=True):
            out.append(replace(p, currency=fx.target, cost=c, idle_cost=i))
    return out


def _fold(
    parts: Iterable[_Part], key_of: Callable[[_Part], GroupKey], *, drop_day: bool = False
) -> list[_Part]:
    """Parts with the same (``key_of(part)``, currency, unallocated) added into one, in order of
    first appearance; ``drop_day``: the folded parts' day is None (days were folded together)."""
    folded: dict[tuple[object, ...], _Part] = {}
    for p in parts:
        key = key_of(p)
        k = (key, p.currency, p.unallocated)
        m = folded.get(k)
        if m is None:
            folded[k] = replace(p, key=key, day=None if drop_day else p.day)
            continue
        m.cost += p.cost
        m.idle_cost += p.idle_cost
        m.shared_idle_cost += p.shared_idle_cost
        m.gpu_hours += p.gpu_hours
        m.unpriced_gpu_hours += p.unpriced_gpu_hours
        m.rate_sources |= p.rate_sources
    return list(folded.values())


def _merge(parts: Iterable[_Part]) -> list[_Part]:
    """Fold days together; on unallocated rows the workload dimensions are null by definition."""

    def key_of(p: _Part) -> GroupKey:
        dims = tuple((d, None if p.unallocated and d.is_workload else v) for d, v in p.key.dims)
        return GroupKey(p.key.period_start, dims)

    return _fold(parts, key_of, drop_day=True)


def _share_pools(parts: list[_Part], policy: IdlePolicy) -> list[_Part]:
    scopes: dict[tuple[object, ...], list[_Part]] = defaultdict(list)
    for p in parts:
        device_dims = tuple(v for d, v in p.key.dims if not d.is_workload)
        scopes[(p.key.period_start, p.currency, device_dims)].append(p)
    out: list[_Part] = []
    for members in scopes.values():
        pools = [p for p in members if p.unallocated]
        takers = [p for p in members if not p.unallocated]
        if not pools or not takers:
            out += members
            continue
        pool = sum((p.cost for p in pools), ZERO)
        weights = (
            [max(p.cost, ZERO) for p in takers] if policy is IdlePolicy.SHARE_BY_USAGE else [1] * len(takers)
        )
        for p, share in zip(takers, allocate(pool, weights), strict=True):
            p.cost += share
            p.idle_cost += share
            p.shared_idle_cost += share
        out += takers
    return out


def _account_wide(q: LedgerQuery) -> LedgerQuery:
    """``q`` over every row, grouped also by the PROJECT/TEAM its scope names (see the module docstring)."""
    hidden = [Dimension.PROJECT] if q.access.projects else []
    hidden += [Dimension.TEAM] if q.access.teams else []
    return replace(q, group_by=(*q.group_by, *hidden), access=ALL)


def _own(parts: list[_Part], q: LedgerQuery) -> list[_Part]:
    """The parts ``q.access`` allows, the dimensions :func:`_account_wide` added folded away."""
    access = q.access
    allowed = (p for p in parts if access.allows(p.key.value(Dimension.PROJECT), p.key.value(Dimension.TEAM)))
    return _fold(
        allowed,
        lambda p: GroupKey(p.key.period_start, tuple((d, v) for d, v in p.key.dims if d in q.group_by)),
    )


def _sort_key(p: _Part) -> tuple[object, ...]:
    dims = tuple((v is not None, v or "") for _, v in p.key.dims)
    return (p.key.period_start is not None, p.key.period_start or 0, dims, p.currency, p.unallocated)


def cost(
    conn: Connection,
    q: LedgerQuery,
    policy: IdlePolicy = IdlePolicy.SEPARATE,
    currency: str | None = None,
    *,
    page: Page = WHOLE,
) -> list[CostRow]:
    """Cost rows per (period, group, currency); see the module docstring for policy, FX, access and paging."""
    target = check_currency(conn, currency) if currency is not None else None
    if policy is IdlePolicy.SEPARATE and target is None:
        # Nothing to share or convert: one SQL row per answer row (workload dimensions are NULL on
        # the pool's rows in SQL already), in the SQL order, paged and capped there.
        return [_row(p) for p in _sql_parts(conn, q, by_day=False, page=page)]
    if page.first is None and page.max_rows is not None:
        page.refuse_above(_count_groups(conn, q) - page.offset)
    account_wide = not q.access.everything and (policy is not IdlePolicy.SEPARATE or target is not None)
    sq = _account_wide(q) if account_wide else q
    parts = _sql_parts(conn, sq, by_day=target is not None)
    if target is not None:
        days = [p.day for p in parts if p.day is not None]
        parts = _convert(parts, FxTable(conn, target, {p.currency for p in parts}, days))
    parts = _merge(parts)
    if policy is not IdlePolicy.SEPARATE:
        parts = _share_pools(parts, policy)
    if account_wide:
        parts = _own(parts, q)
    parts.sort(key=_sort_key)
    # Computed whole in Python: a row's cursor is its position in the sorted answer.
    offset = page.offset
    return [_row(p, (offset + i,)) for i, p in enumerate(page.slice(parts))]


def _row(p: _Part, position: tuple[int] | None = None) -> CostRow:
    return CostRow(
        key=p.key if position is None else replace(p.key, order=position),
        currency=p.currency,
        cost=p.cost,
        idle_cost=p.idle_cost,
        shared_idle_cost=p.shared_idle_cost,
        gpu_hours=p.gpu_hours,
        unpriced_gpu_hours=p.unpriced_gpu_hours,
        rate_source=one_of(min(p.rate_sources, default=None), max(p.rate_sources, default=None)),
        unallocated=p.unallocated,
    )
