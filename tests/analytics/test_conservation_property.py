"""Property (docs/design.md §4 Conservation): under every idle policy, for any grouping, the rows of a
cost answer add up to the ungrouped total to the nano, per currency."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_rows import at, rebuild_days, row
from sqlmodel import Session

from service.analytics.access import ALL
from service.analytics.cost import cost
from service.analytics.dims import Dimension, IdlePolicy
from service.analytics.query import LedgerQuery
from service.analytics.window import check_window
from service.db import make_engine
from service.models import LedgerDay, LedgerGroupDay, LedgerGroupHour, LedgerHour

money = st.decimals(min_value=0, max_value=100, places=9, allow_nan=False, allow_infinity=False)
ledger_rows = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=47),  # hour
        st.sampled_from(["GPU-a", "GPU-b", "GPU-c"]),
        st.sampled_from(["", "job-1", "job-2", "job-3"]),  # '' = unallocated
        st.sampled_from(["onprem", "aws"]),
        st.sampled_from(["USD", "EUR"]),
        money,
        st.floats(min_value=0, max_value=1),  # idle share of the row
    ),
    min_size=1,
    max_size=40,
    unique_by=lambda r: (r[0], r[1], r[2]),
)
GROUPINGS = [(), (Dimension.PROJECT,), (Dimension.TEAM, Dimension.ENVIRONMENT), (Dimension.DEVICE,)]


def totals(rows) -> dict[str, Decimal]:  # type: ignore[no-untyped-def]
    out: dict[str, Decimal] = defaultdict(Decimal)
    for r in rows:
        out[r.currency] += r.cost
    return dict(out)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=ledger_rows)
def test_every_policy_conserves_cost(sqlite_url: str, data) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(sqlite_url)
    try:
        with engine.begin() as conn:
            conn.execute(LedgerHour.__table__.delete())
            conn.execute(LedgerDay.__table__.delete())
            conn.execute(LedgerGroupHour.__table__.delete())
            conn.execute(LedgerGroupDay.__table__.delete())
        with Session(engine) as session:
            session.add_all(
                row(
                    h,
                    device,
                    workload,
                    environment=env,
                    project=workload.replace("job", "project") or None,
                    team=("team-x" if workload == "job-1" else "team-y") if workload else None,
                    currency=currency,
                    cost=amount,
                    idle_cost=(amount * Decimal(idle)).quantize(Decimal("1e-9")),
                )
                for h, device, workload, env, currency, amount, idle in data
            )
            session.commit()
        rebuild_days(engine)
        expected: dict[str, Decimal] = defaultdict(Decimal)
        for *_, currency, amount, _ in data:
            expected[currency] += amount
        window = check_window(at(0), at(48), max_days=400)
        with engine.connect() as conn:
            for policy in IdlePolicy:
                for group_by in GROUPINGS:
                    answer = cost(conn, LedgerQuery(window, group_by=group_by, access=ALL), policy, None)
                    assert totals(answer) == dict(expected), (policy, group_by)
                    for r in answer:
                        assert Decimal(0) <= r.idle_cost <= r.cost
    finally:
        engine.dispose()
