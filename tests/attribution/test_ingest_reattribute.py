"""Rules at ingest and ``reattribute`` on real SQLite and PostgreSQL: hand-computed owners, the
facts kept, rollups and segments rebuilt, the ledger version bumped only when something changed,
idempotent, total cost unchanged."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import polars as pl
import pytest
from attribution_fleet import DAY0, DOCKER, HOURS, RULES_V1, TRAIN, ingest, owners, rule, total_cost
from sqlalchemy import Engine, func, select

from service.attribution.reattribute import reattribute
from service.ledger import retention, segments
from service.ledger import version as ledger_version
from service.models import (
    Device,
    DeviceTagDay,
    LedgerDay,
    LedgerGroupDay,
    LedgerGroupHour,
    LedgerHourSegment,
    WorkloadFact,
    WorkloadFactDay,
)

END = DAY0 + dt.timedelta(hours=HOURS)
H0 = int(DAY0.timestamp()) // 3600


def _version(engine: Engine) -> int:
    with engine.connect() as conn:
        return ledger_version.current(conn)


def _cost_by(engine: Engine, table: type, column: str) -> dict[object, Decimal]:
    t = table.__table__  # type: ignore[attr-defined]
    with engine.connect() as conn:
        rows = conn.execute(select(t.c[column], func.sum(t.c.cost)).group_by(t.c[column]))
        return {k: Decimal(v) for k, v in rows}


def test_rules_at_ingest_name_the_owners_and_keep_the_facts(engine: Engine) -> None:
    ingest(engine)
    assert owners(engine) == [
        # the namespace label named the project (ML-research → research → Research), the node pool
        # the team; the idle hour belongs to nobody
        ("GPU-a", 0, TRAIN, "Research", "research", None, "project-from-team-label"),
        ("GPU-a", 1, "", None, None, None, None),
        # the source named "atlas": it beats the non-override cost-center rule
        ("GPU-b", 0, DOCKER, "atlas", None, None, "source"),
        ("GPU-b", 1, DOCKER, "atlas", None, None, "source"),
    ]
    with engine.connect() as conn:
        kept = conn.execute(
            select(WorkloadFact.__table__).order_by(WorkloadFact.__table__.c.workload_key)  # type: ignore[attr-defined]
        ).all()
        tags = dict(conn.execute(select(Device.__table__.c.device_id, Device.__table__.c.tags)).all())  # type: ignore[attr-defined]
    assert [(r.source, r.workload_key, r.facts, r.project, r.team, r.user_name) for r in kept] == [
        ("fleet", DOCKER, {"docker.label:cost-center": "cc-7"}, "atlas", None, None),
        (
            "fleet",
            TRAIN,
            {"k8s.namespace": "ml", "k8s.namespace_label:team": "ML-research"},
            None,
            None,
            None,
        ),
    ]
    assert tags == {"GPU-a": {"k8s.node_label:pool": "research-pool"}, "GPU-b": None}
    # every rollup carries the recorded rule: 2 USD per device-hour
    expected = {None: Decimal(2), "project-from-team-label": Decimal(2), "source": Decimal(4)}
    for table in (LedgerDay, LedgerGroupHour, LedgerGroupDay):
        assert _cost_by(engine, table, "owner_rule") == expected, table
    with engine.connect() as conn:
        arrow = conn.execute(select(LedgerHourSegment.__table__.c.arrow)).scalar_one()  # type: ignore[attr-defined]
    segment = segments.decode(arrow, ["device_id", "owner_rule"]).with_columns(pl.all().cast(pl.String))
    assert segment.rows() == [
        ("GPU-a", "project-from-team-label"), ("GPU-b", "source"), ("GPU-a", None), ("GPU-b", "source"),
    ]  # fmt: skip


def test_reattribute_moves_owners_rebuilds_and_is_idempotent(engine: Engine) -> None:
    ingest(engine)
    before, total = _version(engine), total_cost(engine)
    # cost-center now overrides what the source named; the node-pool rule is gone
    v2 = (RULES_V1[0], rule("cc-project", "docker.label:cost-center", "project", override=True))
    ingested = owners(engine)
    dry = reattribute(engine, v2, DAY0, END, dry_run=True)
    assert (dry.owners_changed, dry.rows_changed, dry.days_rebuilt) == (2, 3, 1)
    assert owners(engine) == ingested and _version(engine) == before  # nothing written, nothing bumped
    result = reattribute(engine, v2, DAY0, END)
    assert (result.owners, result.owners_changed, result.rows_changed, result.days_rebuilt) == (2, 2, 3, 1)
    assert owners(engine) == [
        ("GPU-a", 0, TRAIN, "Research", None, None, "project-from-team-label"),
        ("GPU-a", 1, "", None, None, None, None),
        ("GPU-b", 0, DOCKER, "cc-7", None, None, "cc-project"),
        ("GPU-b", 1, DOCKER, "cc-7", None, None, "cc-project"),
    ]
    assert _version(engine) == before + 1
    assert total_cost(engine) == total == Decimal(8)
    for table in (LedgerDay, LedgerGroupHour, LedgerGroupDay):
        assert _cost_by(engine, table, "project") == {None: 2, "Research": 2, "cc-7": 4}, table
    # again with the same rules: nothing to change, nothing written, the cache stays valid
    again = reattribute(engine, v2, DAY0, END)
    assert (again.owners, again.owners_changed, again.rows_changed, again.days_rebuilt) == (2, 0, 0, 0)
    assert _version(engine) == before + 1
    # no rules at all: the source's own owner comes back from workload_fact
    reattribute(engine, (), DAY0, END)
    assert owners(engine) == [
        ("GPU-a", 0, TRAIN, None, None, None, None),
        ("GPU-a", 1, "", None, None, None, None),
        ("GPU-b", 0, DOCKER, "atlas", None, None, "source"),
        ("GPU-b", 1, DOCKER, "atlas", None, None, "source"),
    ]
    assert total_cost(engine) == Decimal(8)
    # and the first rules give back exactly what the ingest wrote
    reattribute(engine, RULES_V1, DAY0, END)
    ingested = owners(engine)
    ingest(engine)
    assert owners(engine) == ingested


def test_reattribute_only_touches_its_window(engine: Engine) -> None:
    ingest(engine)
    v2 = (rule("cc-project", "docker.label:cost-center", "project", override=True),)
    result = reattribute(engine, v2, DAY0 + dt.timedelta(hours=1), END)
    assert result.rows_changed == 1
    assert [r[3] for r in owners(engine) if r[0] == "GPU-b"] == ["atlas", "cc-7"]


def test_reattribute_of_rows_from_before_facts_were_kept(engine: Engine) -> None:
    """Rows ingested before migration 0013 have no workload_fact (nor 0017's per-day facts): their own
    owner is the source's."""
    ingest(engine, rules=())
    with engine.begin() as conn:
        conn.execute(WorkloadFact.__table__.delete())  # type: ignore[attr-defined]
        conn.execute(WorkloadFactDay.__table__.delete())  # type: ignore[attr-defined]
    result = reattribute(engine, RULES_V1, DAY0, END)
    assert result.owners_changed == 1  # GPU-a's workload: only the node pool's team (no facts kept)
    assert owners(engine)[0] == ("GPU-a", 0, TRAIN, None, "research", None, "team-from-pool")
    assert owners(engine)[2][3:] == ("atlas", None, None, "source")


def test_an_empty_window_is_refused(engine: Engine) -> None:
    with pytest.raises(ValueError, match="window is empty"):
        reattribute(engine, RULES_V1, END, DAY0)


def test_prune_drops_the_facts_only_pruned_hours_had(engine: Engine) -> None:
    ingest(engine)  # facts reported now (wall clock): after any month prune may cut
    stale = dt.datetime(2020, 1, 15, tzinfo=dt.UTC)
    with engine.begin() as conn:
        conn.execute(
            WorkloadFact.__table__.insert().values(  # type: ignore[attr-defined]
                source="old", workload_key="docker:gone", facts={"docker.image": "x"}, updated_at=stale
            )
        )
        stale_day = int(stale.timestamp()) // 86_400  # and the facts kept for a pruned day
        conn.execute(
            WorkloadFactDay.__table__.insert().values(  # type: ignore[attr-defined]
                source="old", workload_key="docker:gone", day_index=stale_day, facts={"docker.image": "x"}
            )
        )
        conn.execute(DeviceTagDay.__table__.insert().values(device_id="GPU-gone", day_index=stale_day))  # type: ignore[attr-defined]
        result = retention.prune(conn, dt.datetime(2020, 2, 1, tzinfo=dt.UTC))
        kept = conn.execute(select(WorkloadFact.__table__.c.workload_key)).scalars().all()  # type: ignore[attr-defined]
        kept_days = conn.execute(select(WorkloadFactDay.__table__.c.workload_key)).scalars().all()  # type: ignore[attr-defined]
        kept_tags = conn.execute(select(DeviceTagDay.__table__.c.device_id)).scalars().all()  # type: ignore[attr-defined]
    assert result.workload_facts_deleted == 3
    assert sorted(kept) == [DOCKER, TRAIN]
    assert sorted(kept_days) == [DOCKER, TRAIN] and sorted(kept_tags) == ["GPU-a", "GPU-b"]  # DAY0's
