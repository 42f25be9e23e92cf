"""Access scopes in the analytics layer: a scoped caller gets exactly its own rows, never more.

The ledger: one hour, on-prem, USD. alpha (team ml) costs 3, beta (team ml) 1, gamma (team web) 2,
and 1 of nobody's time (the pool). Shares by hand: SHARE_BY_USAGE splits the pool 3:1:2 = 0.5,
0.166666667, 0.333333333; SHARE_EVENLY 1/3 each, the odd nano to the first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

import pytest
from ledger_rows import at, row
from sqlalchemy import Engine

from service.analytics.access import ALL, Access, Forbidden
from service.analytics.cost import CostRow, cost
from service.analytics.devices import connector_states, devices_page
from service.analytics.dims import Dimension, IdlePolicy
from service.analytics.effective import effective_cost
from service.analytics.idle import idle_waste
from service.analytics.query import LedgerQuery
from service.analytics.usage import usage
from service.analytics.window import check_window
from service.billing.queries import billing_lines_page, rates_in
from service.billing.reconcile import reconcile
from service.models import Device, FxRate

D = Decimal
WINDOW = check_window(at(0), at(1), max_days=400)
ALPHA = Access(projects=frozenset({"alpha"}))
ML = Access(teams=frozenset({"ml"}))
NOBODY = Access()


@pytest.fixture
def ledger(put) -> None:  # type: ignore[no-untyped-def]
    put(
        [
            row(0, "GPU-a", "job-1", project="alpha", team="ml", cost="3", idle_cost="0"),
            row(0, "GPU-b", "job-2", project="beta", team="ml", cost="1", idle_cost="0"),
            row(0, "GPU-c", "job-3", project="gamma", team="web", cost="2", idle_cost="0"),
            row(0, "GPU-d", cost="1", idle_cost="1"),
            FxRate(base="USD", quote="EUR", day=at(0).date(), rate=D("0.9")),
            *(Device(device_id=d, source="test", environment="onprem", first_seen=at(0), last_seen=at(1))
              for d in ("GPU-a", "GPU-b", "GPU-c", "GPU-d")),
        ]
    )  # fmt: skip


def q(access: Access, group_by: Iterable[Dimension] = (Dimension.PROJECT,)) -> LedgerQuery:
    return LedgerQuery(WINDOW, group_by=tuple(group_by), access=access)


def run(engine: Engine, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    with engine.connect() as conn:
        return fn(conn, *args, **kw)


def flat(rows: list[CostRow]) -> list[tuple[object, ...]]:
    return [(r.key.value(Dimension.PROJECT), r.cost, r.shared_idle_cost, r.unallocated) for r in rows]


@pytest.mark.parametrize(
    ("policy", "alpha"),
    [
        (IdlePolicy.SEPARATE, ("alpha", D("3"), D("0"), False)),
        (IdlePolicy.SHARE_BY_USAGE, ("alpha", D("3.5"), D("0.5"), False)),
        (IdlePolicy.SHARE_EVENLY, ("alpha", D("3.333333334"), D("0.333333334"), False)),
    ],
)
def test_a_project_caller_gets_exactly_the_unrestricted_row_of_its_project(
    engine: Engine, ledger: None, policy: IdlePolicy, alpha: tuple[object, ...]
) -> None:
    everyone = run(engine, cost, q(ALL), policy)
    assert flat(run(engine, cost, q(ALPHA), policy)) == [alpha]
    assert [r for r in everyone if r.key.value(Dimension.PROJECT) == "alpha"] == run(
        engine, cost, q(ALPHA), policy
    )
    # and under conversion too: the per-day conversion is the account's, the row is alpha's
    converted = run(engine, cost, q(ALL), policy, "EUR")
    mine = run(engine, cost, q(ALPHA), policy, "EUR")
    assert mine == [r for r in converted if r.key.value(Dimension.PROJECT) == "alpha"] and len(mine) == 1


@pytest.mark.parametrize("policy", list(IdlePolicy))
def test_a_team_caller_gets_its_projects_rows_and_never_the_pool_row(
    engine: Engine, ledger: None, policy: IdlePolicy
) -> None:
    everyone = run(engine, cost, q(ALL), policy)
    mine = run(engine, cost, q(ML), policy)
    assert [r.key.value(Dimension.PROJECT) for r in mine] == ["alpha", "beta"]
    assert mine == [r for r in everyone if r.key.value(Dimension.PROJECT) in ("alpha", "beta")]


def test_ungrouped_a_scoped_caller_gets_its_own_share_of_the_pool(engine: Engine, ledger: None) -> None:
    # Grouped by nothing, the team's row is its share: by usage ml holds 4 of 6 allocated → 4 + 0.666666667.
    [by_usage] = run(engine, cost, q(ML, ()), IdlePolicy.SHARE_BY_USAGE)
    assert (by_usage.cost, by_usage.shared_idle_cost) == (D("4.666666667"), D("0.666666667"))
    # Evenly, shares are per team the scope names (ml and web): ml gets half the pool.
    [evenly] = run(engine, cost, q(ML, ()), IdlePolicy.SHARE_EVENLY)
    assert (evenly.cost, evenly.shared_idle_cost) == (D("4.5"), D("0.5"))
    [separate] = run(engine, cost, q(ML, ()), IdlePolicy.SEPARATE)
    assert (separate.cost, separate.unallocated) == (D("4"), False)
    [project] = run(engine, cost, q(ALPHA, [Dimension.ENVIRONMENT]), IdlePolicy.SHARE_BY_USAGE)
    assert (project.key.value(Dimension.ENVIRONMENT), project.cost) == ("onprem", D("3.5"))


def test_a_caller_with_no_scope_sees_nothing(engine: Engine, ledger: None) -> None:
    for policy in IdlePolicy:
        assert run(engine, cost, q(NOBODY), policy) == []
    assert run(engine, usage, q(NOBODY)) == []


def test_usage_idle_and_effective_cost_keep_only_the_scopes_rows(engine: Engine, ledger: None) -> None:
    for fn in (usage, idle_waste, effective_cost):
        rows = run(engine, fn, q(ML))
        assert [r.key.value(Dimension.PROJECT) for r in rows] == ["alpha", "beta"], fn
    [total] = run(engine, idle_waste, q(ALPHA, ()))
    assert total.unallocated_idle_gpu_hours == 0.0 and total.unallocated_idle_cost == 0
    [everyone] = run(engine, idle_waste, q(ALL, ()))
    assert everyone.unallocated_idle_cost == D("1")
    [alpha] = run(engine, usage, q(ALPHA, [Dimension.TEAM]))
    assert (alpha.key.value(Dimension.TEAM), alpha.gpu_hours) == ("ml", 1.0)


def test_devices_are_those_the_scope_held(engine: Engine, ledger: None) -> None:
    def ids(access: Access) -> list[str]:
        page = run(engine, devices_page, {}, access=access, first=10, after=None, page_size_max=10)
        return [d.device_id for d in page.devices]

    assert ids(ALL) == ["GPU-a", "GPU-b", "GPU-c", "GPU-d"]
    assert ids(ALPHA) == ["GPU-a"]
    assert ids(ML) == ["GPU-a", "GPU-b"]
    assert ids(NOBODY) == []


def test_billing_data_is_account_wide(engine: Engine, ledger: None) -> None:
    calls: dict[str, Callable[[Access], Any]] = {
        "reconciliation": lambda a: run(engine, reconcile, WINDOW, access=a),
        "billingLines": lambda a: run(
            engine, billing_lines_page, None, {}, access=a, first=1, after=None, page_size_max=1
        ),
        "rates": lambda a: run(engine, rates_in, WINDOW, {}, access=a),
        "connectors": lambda a: run(engine, connector_states, a),
    }
    for name, call in calls.items():
        call(ALL)
        for scoped in (ALPHA, ML):
            with pytest.raises(Forbidden) as err:
                call(scoped)
            assert err.value.code == "FORBIDDEN"
            assert err.value.message == f"{name} is account-wide data: it needs the `read` scope"
