"""Property, on real SQLite and PostgreSQL: whatever the rules the ledger was ingested with and
whatever the rules now, ``reattribute`` keeps every cost where it was in total (ledger and
rollups), leaves exactly the owners a fresh ingest under the new rules would write, and a second
run changes nothing and does not bump the ledger version."""

from __future__ import annotations

import datetime as dt

from attribution_fleet import DAY0, HOURS, ingest, owners, rule, total_cost
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from service.attribution import AttributionRule
from service.attribution.reattribute import reattribute
from service.ledger import version as ledger_version
from service.models import LedgerDay, LedgerGroupDay, LedgerGroupHour

END = DAY0 + dt.timedelta(hours=HOURS)
_SOURCES = ("k8s.namespace_label:team", "k8s.namespace", "docker.label:cost-center", "k8s.node_label:pool")
_rule = st.builds(
    lambda i, source, dim, override, value, rewrite: rule(
        f"r{i}", source, dim, override=override, value=value, values=rewrite
    ),
    st.integers(0, 999),
    st.sampled_from(_SOURCES),
    st.sampled_from(["project", "team", "user"]),
    st.booleans(),
    st.sampled_from([None, "x-$0"]),
    st.sampled_from([{}, {"ml": "ML", "cc-7": "CC"}]),
)
_rules = st.lists(_rule, max_size=4, unique_by=lambda r: r.name)


def _version(engine: Engine) -> int:
    with engine.connect() as conn:
        return ledger_version.current(conn)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=_rules, after=_rules)
def test_reattribute_conserves_cost_is_idempotent_and_equals_a_fresh_ingest(
    engine: Engine, before: list[AttributionRule], after: list[AttributionRule]
) -> None:
    ingest(engine, before)
    totals = [total_cost(engine, t) for t in (LedgerDay, LedgerGroupHour, LedgerGroupDay)]
    reattribute(engine, after, DAY0, END)
    assert [total_cost(engine, t) for t in (LedgerDay, LedgerGroupHour, LedgerGroupDay)] == totals
    moved = owners(engine)
    version = _version(engine)
    again = reattribute(engine, after, DAY0, END)
    assert (again.owners_changed, again.rows_changed, again.days_rebuilt) == (0, 0, 0)
    assert _version(engine) == version and owners(engine) == moved
    ingest(engine, after)
    assert owners(engine) == moved
