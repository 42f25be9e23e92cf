"""After `gpu-ledger prune`, an answer that needs device-level hours the prune dropped fails with
HOURS_PRUNED instead of answering from the hours that are left (docs/rollups.md, "Retention").

The ledger of tests/pruned_ledger.py (eight hours on two devices, January pruned). The window cut
mid-day in January: by PROJECT (the group rollups keep it) still exact; by DEVICE (ledger_hour for
the partial-day edges) refused, in the domain and through GraphQL; from the boundary on, answered.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from api.conftest import Gql
from pruned_ledger import FEB, JAN, write_pruned
from sqlalchemy import Engine

from service.analytics.access import ALL
from service.analytics.cost import cost
from service.analytics.dims import Dimension, Granularity
from service.analytics.errors import HoursPruned
from service.analytics.query import LedgerQuery
from service.analytics.usage import usage
from service.analytics.window import Window, hours_kept_from
from service.ledger import retention
from service.timeutil import hour_index

MID_DAY = Window(JAN, JAN + dt.timedelta(hours=8))  # 4 pruned hours, 4 kept
FROM_BOUNDARY = Window(FEB, FEB + dt.timedelta(hours=4))
COST = """query($w: TimeWindow!, $by: [Dimension!]!){ cost(window: $w, groupBy: $by) {
    project device cost { amount currency } } }"""


def _amounts(rows: list) -> dict[tuple[str | None, str], Decimal]:
    return {
        (r.key.value(Dimension.PROJECT) or r.key.value(Dimension.DEVICE), r.currency): r.cost for r in rows
    }


@pytest.mark.postgres
def test_device_level_reads_of_pruned_hours_fail(engine: Engine) -> None:
    write_pruned(engine)
    by_project = LedgerQuery(MID_DAY, Granularity.TOTAL, (Dimension.PROJECT,), access=ALL)
    by_device = LedgerQuery(MID_DAY, Granularity.TOTAL, (Dimension.DEVICE,), access=ALL)
    hourly = LedgerQuery(MID_DAY, Granularity.HOUR, (Dimension.DEVICE,), access=ALL)  # day segments' path
    with engine.connect() as conn:
        assert retention.first_kept_hour(conn) == hour_index(FEB)
        # without the boundary (what every read did before): the device answer is silently short
        assert _amounts(cost(conn, by_device)) == {
            ("GPU-a", "USD"): Decimal("4.000000004"),
            ("GPU-b", "EUR"): 10,
        }
        lookups: list[int | None] = []

        def first_hour() -> int | None:
            lookups.append(retention.first_kept_hour(conn))
            return lookups[-1]

        with hours_kept_from(first_hour):
            # the group rollups hold all eight hours: exact, and the boundary is not even looked up
            assert _amounts(cost(conn, by_project)) == {
                ("alpha", "USD"): Decimal("8.000000008"),
                (None, "EUR"): Decimal(20),
            }
            assert lookups == []
            with pytest.raises(HoursPruned, match="2025-01-31T20:00Z.*before 2025-02-01 were pruned"):
                cost(conn, by_device)
            with pytest.raises(HoursPruned):
                usage(conn, hourly)
            assert lookups == [hour_index(FEB)]  # once per request
            from_boundary = LedgerQuery(FROM_BOUNDARY, Granularity.TOTAL, (Dimension.DEVICE,), access=ALL)
            assert _amounts(cost(conn, from_boundary)) == {
                ("GPU-a", "USD"): Decimal("4.000000004"),
                ("GPU-b", "EUR"): 10,
            }


@pytest.mark.postgres
def test_the_api_says_hours_pruned(engine: Engine, gql: Gql) -> None:
    write_pruned(engine)
    w = {"start": JAN.isoformat(), "end": (JAN + dt.timedelta(hours=8)).isoformat()}
    refused = gql(COST, {"w": w, "by": ["DEVICE"]})
    [err] = refused["errors"]
    assert err["extensions"] == {"code": "HOURS_PRUNED"} and "gpu-ledger prune" in err["message"]
    answered = gql(COST, {"w": w, "by": ["PROJECT"]})
    assert "errors" not in answered, answered
    assert sorted((r["project"] or "", r["cost"]["amount"]) for r in answered["data"]["cost"]) == [
        ("", "20.000000000"),
        ("alpha", "8.000000008"),
    ]
