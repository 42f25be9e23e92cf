"""Facts as they were reported, day by day (docs/attribution.md, "Re-applied"), on real SQLite and
PostgreSQL: a pod relabelled and a node repooled during the window are re-decided with each day's
own facts by ``reattribute`` — exactly the owners a fresh ingest of the window under the new rules
writes — and the ingest of a day uses that day's facts, not those of the context read around it.

The fleet: GPU-a held all day long, three UTC days, by pod ``k8s:ml/train/main``; each day the
source reports the pod's namespace label ``team`` and GPU-a's node label ``pool`` as they were
that day.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Literal

import polars as pl
from attribution_fleet import price, rule
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select

from connectors.base import SAMPLE_SCHEMA, ConnectorConfig, DeviceInfo, SampleBatch, Sampling, WorkloadInfo
from service.attribution import AttributionRule
from service.attribution.reattribute import reattribute
from service.ledger.ingest import ingest_window
from service.models import LedgerHour

DAY0 = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
DAYS = 3
END = DAY0 + dt.timedelta(days=DAYS)
TRAIN = "k8s:ml/train/main"


class DailyConfig(ConnectorConfig):
    pass


class DailyFleet:
    """Readings every 10 minutes; each UTC day's batch carries that day's facts and tags."""

    kind: ClassVar[Literal["metrics"]] = "metrics"
    config_model: ClassVar[type[ConnectorConfig]] = DailyConfig
    sampling = Sampling.every(600.0)

    def __init__(self, teams: Sequence[str], pools: Sequence[str]) -> None:
        self.teams, self.pools = teams, pools

    def collect(self, start: dt.datetime, end: dt.datetime) -> Iterator[SampleBatch]:
        for day in range(DAYS):
            first = DAY0 + dt.timedelta(days=day)
            lo, hi = max(start, first), min(end, first + dt.timedelta(days=1))
            if lo >= hi:
                continue
            t0, t1 = int(lo.timestamp() * 1000), int(hi.timestamp() * 1000)
            ts = range(-(-t0 // 600_000) * 600_000, t1, 600_000)
            rows = [("GPU-a", t, "gpu_util", 50.0, TRAIN, 1.0) for t in ts]
            device = DeviceInfo(
                "GPU-a", "onprem", gpu_model="H100", tags={"k8s.node_label:pool": self.pools[day]}
            )
            work = WorkloadInfo(
                TRAIN,
                namespace="ml",
                facts={"k8s.namespace": "ml", "k8s.namespace_label:team": self.teams[day]},
            )
            yield SampleBatch(pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row"), [device], [work])

    def discover(self) -> list[DeviceInfo]:
        return []


def ingest(engine: Engine, fleet: DailyFleet, rules: Sequence[AttributionRule]) -> None:
    ingest_window(engine, "daily", fleet, DAY0, END, attribution_rules=rules)


def owners(engine: Engine) -> list[tuple[Any, ...]]:
    """(hour, project, team, user, owner_rule) of every held row, in hour order."""
    h = LedgerHour.__table__
    with engine.connect() as conn:
        rows = conn.execute(
            select(h.c.hour_start, h.c.project, h.c.team, h.c.user_name, h.c.owner_rule)
            .where(h.c.workload_key == TRAIN)
            .order_by(h.c.hour_start)
        )
        return [tuple(r) for r in rows]


BY_LABEL = [
    rule("project-from-team", "k8s.namespace_label:team", "project"),
    rule("team-from-pool", "k8s.node_label:pool", "team", match="(.*)-pool", value="$1"),
]


def test_each_day_keeps_the_owner_its_own_facts_name_on_ingest_and_on_reattribute(engine: Engine) -> None:
    price(engine)
    fleet = DailyFleet(["vision", "vision", "speech"], ["a-pool", "b-pool", "b-pool"])
    ingest(engine, fleet, [])
    want = [("vision", "a"), ("vision", "b"), ("speech", "b")]
    reattribute(engine, BY_LABEL, DAY0, END)
    got = owners(engine)
    assert len(got) == 24 * DAYS
    assert [(p, t) for _, p, t, *_ in got[::24]] == want  # not the last day's speech/b everywhere
    assert {r[4] for r in got} == {"project-from-team"}
    ingest(engine, fleet, BY_LABEL)  # a fresh ingest under the same rules: the same owners
    assert owners(engine) == got
    # only the middle day re-ingested, relabelled since: the other days keep theirs
    ingest_window(
        engine, "daily", DailyFleet(["x", "nlp", "y"], ["z", "c-pool", "z"]), DAY0 + dt.timedelta(days=1),
        DAY0 + dt.timedelta(days=2), attribution_rules=BY_LABEL,
    )  # fmt: skip
    reattribute(engine, BY_LABEL, DAY0, END)
    assert [(p, t) for _, p, t, *_ in owners(engine)[::24]] == [
        ("vision", "a"),
        ("nlp", "c"),
        ("speech", "b"),
    ]


_SOURCES = ("k8s.namespace_label:team", "k8s.namespace", "k8s.node_label:pool")
_rule = st.builds(
    lambda i, source, dim, override: rule(f"r{i}", source, dim, override=override),
    st.integers(0, 999),
    st.sampled_from(_SOURCES),
    st.sampled_from(["project", "team", "user"]),
    st.booleans(),
)
_rules = st.lists(_rule, max_size=3, unique_by=lambda r: r.name)
_days = st.lists(st.sampled_from(["vision", "speech", "nlp-pool"]), min_size=DAYS, max_size=DAYS)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=_rules, after=_rules, teams=_days, pools=_days)
def test_reattribute_over_changing_facts_equals_a_fresh_ingest_with_the_facts_as_they_were(
    engine: Engine,
    before: list[AttributionRule],
    after: list[AttributionRule],
    teams: list[str],
    pools: list[str],
) -> None:
    fleet = DailyFleet(teams, pools)
    ingest(engine, fleet, before)
    reattribute(engine, after, DAY0, END)
    moved = owners(engine)
    ingest(engine, fleet, after)
    assert owners(engine) == moved
